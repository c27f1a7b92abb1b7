"""Batch processing with a batch handler: messages stored in SQLite, one commit a batch.

A handler that writes to a database is fastest in batches: one transaction
for many rows instead of one per message. ``Consumer(batch_handler=...)``
hands the handler lists of up to ``--batch-size`` messages: when a batch is
full, ``--batch-timeout`` seconds after its first message (the tail of a
stream never fills one), or at once when the consumer is *starved* (85% of
its RDY in flight: little more can arrive until some are answered).
Returning finishes the whole batch; raising requeues it (with backoff).

Run it against an nsqd (``gnsqlite broker`` or a real one)::

    python examples/batch_consumer.py --nsqd-tcp-address 127.0.0.1:4150 \\
        --topic events --publish 1000 --count 1000 --batch-size 100 --max-in-flight 200

A bad option, or no nsqd answering at the address, ends it at once with one
line on stderr and exit status 1. See docs/batches.md.
"""

from __future__ import annotations

import argparse
import signal
import sqlite3
import sys

import gevent
import gevent.event

from gnsqlite.cli.wording import EXIT_INTERRUPTED, fail
from gnsqlite.connection import Connection
from gnsqlite.consumer import Consumer
from gnsqlite.errors import NSQError
from gnsqlite.message import Message
from gnsqlite.producer import Producer


class EventStore:
    """Stores each batch of events in SQLite with one ``executemany`` and one commit."""

    def __init__(self, path: str, count: int | None) -> None:
        self.db = sqlite3.connect(path)
        self.db.execute("CREATE TABLE IF NOT EXISTS events (id TEXT PRIMARY KEY, body BLOB)")
        self.count = count
        self.processed = 0
        self.done = gevent.event.Event()

    def store(self, messages: list[Message]) -> None:
        """The batch handler: returning finishes every message, raising requeues them."""
        rows = [(m.id, m.body) for m in messages]
        # INSERT OR IGNORE: a redelivered message (its FIN was lost) is stored once.
        self.db.executemany("INSERT OR IGNORE INTO events VALUES (?, ?)", rows)
        self.db.commit()
        self.processed += len(messages)
        print(f"processed a batch of {len(messages)}", flush=True)
        if self.count is not None and self.processed >= self.count:
            self.done.set()

    def rows(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM events").fetchone()[0])


def build_parser() -> argparse.ArgumentParser:
    """The options, each with its help and default."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--nsqd-tcp-address",
        required=True,
        metavar="ADDR",
        help="nsqd TCP address host:port (required)",
    )
    parser.add_argument("--topic", default="events", help="the topic to read (default %(default)s)")
    parser.add_argument(
        "--channel", default="batch", help="the channel to read (default %(default)s)"
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=100,
        help="most messages handed to the handler at once (default %(default)s)",
    )
    parser.add_argument(
        "--batch-timeout",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds a batch waits to fill after its first message (default %(default)g)",
    )
    parser.add_argument(
        "--max-in-flight",
        type=int,
        default=200,
        help="messages in flight at once, at least --batch-size (default %(default)s)",
    )
    parser.add_argument(
        "--database",
        default=":memory:",
        metavar="FILE",
        help="SQLite file to store the events in (default: in memory)",
    )
    parser.add_argument(
        "--publish",
        type=int,
        default=0,
        metavar="N",
        help="publish N sample events to the topic first (default 0)",
    )
    parser.add_argument(
        "--count",
        type=int,
        default=None,
        metavar="N",
        help="stop after N messages (default: run until Ctrl-C)",
    )
    return parser


def main() -> int:
    parser = build_parser()
    args = parser.parse_args()
    if not args.batch_timeout > 0:
        parser.error("--batch-timeout must be more than 0 seconds")

    store = EventStore(args.database, args.count)
    consumer = Consumer(  # checks the options: ConfigError, InvalidNameError
        args.topic,
        args.channel,
        batch_handler=store.store,
        batch_size=args.batch_size,
        batch_timeout=args.batch_timeout,
        nsqd_tcp_addresses=[args.nsqd_tcp_address],
        max_in_flight=args.max_in_flight,
    )
    probe = Connection(args.nsqd_tcp_address)
    probe.connect()  # raises NSQConnectionError when no nsqd answers there
    probe.close()
    if args.publish:
        with Producer(args.nsqd_tcp_address) as producer:
            bodies = [b"event %d" % i for i in range(args.publish)]
            for start in range(0, len(bodies), 100):
                producer.multi_publish(args.topic, bodies[start : start + 100])

    stop = gevent.event.Event()  # Ctrl-C or SIGTERM
    handlers = [gevent.signal_handler(s, stop.set) for s in (signal.SIGINT, signal.SIGTERM)]
    consumer.start()
    until = f"{args.count} messages" if args.count is not None else "Ctrl-C"
    print(
        f"waiting for messages on {args.topic}/{args.channel} at {args.nsqd_tcp_address},"
        f" stored in batches of up to {args.batch_size} (or every {args.batch_timeout:g} s),"
        f" until {until}",
        flush=True,
    )
    try:
        gevent.wait([store.done, stop], count=1)
    finally:
        consumer.close()
        for handler in handlers:
            handler.cancel()
    handed = consumer.stats()["batches"]["handed_over"]
    print("batches: " + ", ".join(f"{n} {reason}" for reason, n in handed.items()))
    print(f"done: {store.processed} messages, {store.rows()} rows")
    # --count N is a job with an end; without it, Ctrl-C is how it ends (docs/cli.md)
    interrupted = stop.is_set() and not store.done.is_set()
    return EXIT_INTERRUPTED if interrupted and args.count is not None else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except NSQError as exc:  # a bad option, or no nsqd: one line, not a traceback
        fail("batch_consumer", exc)
