"""Bulk insert into SQLite: a single-message handler vs a batch handler.

Not a test: run it by hand::

    python benchmarks/bench_batch_sqlite.py [--messages 20000] [--batch-size 100]
        [--max-in-flight 200] [--journal-mode wal|delete] [--synchronous full|normal]

It starts an nsqd (the embedded broker in a subprocess, or the real nsqd when
``GNSQLITE_NSQD`` names the directory of its binary), and for each handler
publishes ``--messages`` messages (about 100-byte JSON bodies) to a fresh
topic, then times a Consumer from start until every message is committed
to a real SQLite database file (stdlib ``sqlite3``, one file per run in a
temporary directory):

* ``single``: ``handler(message)`` runs one ``INSERT`` and one ``COMMIT``
  per message;
* ``batch``: ``batch_handler(messages)`` runs one ``executemany`` and one
  ``COMMIT`` per batch of up to ``--batch-size``.

Both use the same ``max_in_flight``, journal mode (WAL by default) and
``synchronous`` setting (SQLite's default, FULL: every commit is made
durable). Each run checks that the table ends with exactly ``--messages``
distinct rows. Prints msg/s for each and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gevent.event

from gnsqlite.consumer import Consumer
from gnsqlite.message import Message
from gnsqlite.producer import Producer
from gnsqlite.testing import NsqdServer

SCHEMA = "CREATE TABLE events (id TEXT PRIMARY KEY, user INTEGER, kind TEXT, body BLOB)"
INSERT = "INSERT OR IGNORE INTO events VALUES (?, ?, ?, ?)"


def body(i: int) -> bytes:
    event = {"user": i % 997, "kind": "click", "page": f"/p/{i}", "pad": "x" * 40}
    return json.dumps(event).encode()


def row(message: Message) -> tuple[str, int, str, bytes]:
    event = json.loads(message.body)
    return (message.id, event["user"], event["kind"], message.body)


def open_db(path: Path, journal_mode: str, synchronous: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)  # explicit BEGIN/COMMIT below
    mode = db.execute(f"PRAGMA journal_mode={journal_mode}").fetchone()[0]
    if mode.lower() != journal_mode:
        raise SystemExit(f"bench_batch_sqlite: SQLite refused journal_mode={journal_mode}")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute(SCHEMA)
    return db


def run(
    server: NsqdServer, kind: str, args: argparse.Namespace, directory: Path
) -> tuple[float, int, str]:
    """Seconds to consume ``args.messages`` into a new database file, the rows stored,
    and (batch) how many batches were handed over, by reason."""
    topic = f"bench_sqlite_{kind}_{time.monotonic_ns()}"
    bodies = [body(i) for i in range(args.messages)]
    publish(server.tcp_address, topic, bodies)
    db = open_db(directory / f"{kind}.db", args.journal_mode, args.synchronous)
    done = gevent.event.Event()
    stored = 0

    def single(message: Message) -> None:
        nonlocal stored
        db.execute("BEGIN")
        db.execute(INSERT, row(message))
        db.execute("COMMIT")
        stored += 1
        if stored == args.messages:
            done.set()

    def batch(messages: list[Message]) -> None:
        nonlocal stored
        db.execute("BEGIN")
        db.executemany(INSERT, [row(m) for m in messages])
        db.execute("COMMIT")
        stored += len(messages)
        if stored >= args.messages:
            done.set()

    options: dict[str, Any] = (
        {"batch_handler": batch, "batch_size": args.batch_size, "batch_timeout": 0.5}
        if kind == "batch"
        else {"handler": single}
    )
    consumer = Consumer(
        topic,
        "bench",
        nsqd_tcp_addresses=[server.tcp_address],
        max_in_flight=args.max_in_flight,
        **options,
    )
    start = time.perf_counter()
    consumer.start()
    try:
        if not done.wait(args.timeout):
            raise SystemExit(f"bench_batch_sqlite: {kind} stored {stored} in {args.timeout} s")
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    rows = int(db.execute("SELECT count(DISTINCT id) FROM events").fetchone()[0])
    db.close()
    handed = consumer.stats().get("batches", {}).get("handed_over", {})
    batches = ", ".join(f"{n} {reason}" for reason, n in handed.items() if n)
    return elapsed, rows, f"; batches: {batches}" if batches else ""


def publish(address: str, topic: str, bodies: list[bytes]) -> None:
    with Producer(address) as producer:
        for start in range(0, len(bodies), 1000):
            producer.multi_publish(topic, bodies[start : start + 1000])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--max-in-flight", type=int, default=200)
    parser.add_argument("--journal-mode", choices=("wal", "delete"), default="wal")
    parser.add_argument("--synchronous", choices=("full", "normal", "off"), default="full")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--only", choices=("single", "batch"), help="run one handler")
    args = parser.parse_args()
    if args.messages < 1 or args.batch_size < 1:
        parser.error("--messages and --batch-size must be 1 or more")

    server = NsqdServer()
    server.start()
    try:
        broker = "nsqd (real)" if server.is_real else "embedded broker"
        print(
            f"python {sys.version.split()[0]}, {os.cpu_count()} cores, sqlite"
            f" {sqlite3.sqlite_version}, {broker} at {server.tcp_address}"
        )
        print(
            f"{args.messages:,} messages, max_in_flight={args.max_in_flight},"
            f" batch_size={args.batch_size}, journal_mode={args.journal_mode},"
            f" synchronous={args.synchronous}"
        )
        rates: dict[str, float] = {}
        with tempfile.TemporaryDirectory(prefix="bench_batch_sqlite_") as tmp:
            for kind in (args.only,) if args.only else ("single", "batch"):
                elapsed, rows, batches = run(server, kind, args, Path(tmp))
                if rows != args.messages:
                    raise SystemExit(f"bench_batch_sqlite: {kind} stored {rows} rows")
                rates[kind] = args.messages / elapsed
                print(
                    f"{kind:>6}: {rates[kind]:>9,.0f} msg/s"
                    f" ({elapsed:.2f} s, {rows:,} rows{batches})"
                )
        if len(rates) == 2:
            print(f" ratio: batch is x{rates['batch'] / rates['single']:.1f} single")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
