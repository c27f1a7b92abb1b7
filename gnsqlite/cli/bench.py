"""``gnsqlite bench``: publish and consume throughput, optionally beside pynsq and gnsq.

Publish workloads (messages per second): sequential PUB (one publisher
waiting for each answer), pipelined PUB (50 publishers at once) and MPUB in
batches of 100. Consume: ``--messages`` are queued on a fresh topic, then a
consumer with a no-op handler is timed from start until all are finished,
for each ``--max-in-flight``. By default the embedded broker runs in a
child process (its own core); ``--nsqd-tcp-address`` uses a running nsqd.
With ``--compare``, pynsq and gnsq run the same workloads when installed.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gevent
import gevent.event

from ..consumer import Consumer
from ..net import parse_address
from ..producer import Producer
from ._bench_workloads import BATCH, CONCURRENCY, PUBLISH_MODES, time_publishes
from ._common import (
    EXIT_INTERRUPTED,
    CommandError,
    Parser,
    check_nsqd_tcp,
    normalize_address,
    run,
    stop_on_signals,
)

__all__ = [
    "build_parser",
    "consume_rate",
    "main",
    "publish_rate",
    "queue_messages",
    "time_publishes",
]

_MODE_NAMES = {
    "sequential": "sequential PUB",
    "pipelined": f"pipelined PUB x{CONCURRENCY}",
    "mpub": f"MPUB batches of {BATCH}",
}

_EXAMPLES = """
examples:
  gnsqlite bench                               # both benchmarks, embedded broker
  gnsqlite bench publish --messages 20000 --size 200
  gnsqlite bench consume --max-in-flight 1,100,2500 --compare
  gnsqlite bench --nsqd-tcp-address 127.0.0.1:4150
"""


def build_parser() -> Parser:
    """The ``bench`` argument parser."""
    parser = Parser(
        prog="gnsqlite bench",
        description="Publish and consume benchmarks (messages per second; higher is better).",
        epilog=_EXAMPLES,
    )
    parser.add_argument(
        "which",
        nargs="?",
        choices=("all", "publish", "consume"),
        default="all",
        help="which benchmarks: all, publish or consume (default %(default)s)",
    )
    parser.add_argument(
        "--nsqd-tcp-address",
        metavar="ADDR",
        help="a running nsqd (default: start the embedded broker)",
    )
    parser.add_argument(
        "--messages", type=int, default=20_000, help="messages per run (default %(default)s)"
    )
    parser.add_argument(
        "--size", type=int, default=100, help="message body size in bytes (default %(default)s)"
    )
    parser.add_argument(
        "--max-in-flight",
        default="100,2500",
        help="consume runs, comma-separated (default %(default)s)",
    )
    parser.add_argument(
        "--compare", action="store_true", help="also run pynsq and gnsq when they are installed"
    )
    return parser


# -- gnsqlite's workloads -----------------------------------------------------------------


def publish_rate(
    address: str,
    topic: str,
    body: bytes,
    count: int,
    mode: str,
    options: Mapping[str, Any] | None = None,
) -> float:
    """Seconds gnsqlite's Producer takes to publish ``count`` messages in ``mode``; blocks.

    ``options`` are connection options (``snappy=True``, ``tls_v1=True`` ...).
    """
    with Producer(address, **dict(options or {})) as producer:
        return time_publishes(producer.publish, producer.multi_publish, topic, body, count, mode)


def queue_messages(address: str, topic: str, body: bytes, count: int) -> None:
    """MPUB ``count`` copies of ``body`` over a plain socket, 1,000 at a time; blocks."""
    with socket.create_connection(parse_address(address), timeout=30) as sock:
        sock.sendall(b"  V2")
        left = count
        while left:
            n = min(1000, left)
            payload = struct.pack(">I", n) + (struct.pack(">I", len(body)) + body) * n
            sock.sendall(b"MPUB %s\n" % topic.encode() + struct.pack(">I", len(payload)) + payload)
            reply = b""
            while len(reply) < 10:
                chunk = sock.recv(64)
                if not chunk:
                    raise CommandError(f"nsqd at {address} closed the connection")
                reply += chunk
            if reply[8:10] != b"OK":
                raise CommandError(f"MPUB to {address} failed: {reply[8:]!r}")
            left -= n


def consume_rate(
    address: str,
    topic: str,
    count: int,
    max_in_flight: int,
    options: Mapping[str, Any] | None = None,
    prepare: Callable[[Consumer], object] | None = None,
) -> float:
    """Seconds gnsqlite's Consumer takes to handle ``count`` queued messages; blocks.

    ``options`` are connection options (``snappy=True``, ``tls_v1=True`` ...);
    ``prepare(consumer)`` runs before the clock starts (the overhead benchmark
    instruments the consumer there).
    """
    done = gevent.event.Event()
    handled = 0

    def handle(message: object) -> None:
        nonlocal handled
        handled += 1
        if handled == count:
            done.set()

    consumer = Consumer(
        topic,
        "bench",
        handle,
        nsqd_tcp_addresses=[address],
        max_in_flight=max_in_flight,
        concurrency=min(max_in_flight, 100),
        **dict(options or {}),
    )
    if prepare is not None:
        prepare(consumer)
    start = time.perf_counter()
    consumer.start()
    try:
        if not done.wait(600):
            raise CommandError(f"gnsqlite handled only {handled} of {count} in 600 s")
        return time.perf_counter() - start
    finally:
        consumer.close()


# -- the run ------------------------------------------------------------------------------


def main(argv: Sequence[str]) -> int:
    """Run ``gnsqlite bench``; blocks until every run ends (Ctrl-C stops)."""
    args = build_parser().parse_args(list(argv))
    args.prog = "gnsqlite bench"
    return run(_bench, args)


def _bench(args: Any) -> int:
    if args.messages < BATCH or args.size < 1:
        raise CommandError(f"--messages must be {BATCH} or more and --size 1 or more", 2)
    try:
        flights = [int(x) for x in args.max_in_flight.split(",") if x.strip()]
    except ValueError:
        bad = f"bad --max-in-flight {args.max_in_flight!r}: use e.g. 1,100"
        raise CommandError(bad, 2) from None
    if not flights or min(flights) < 1:
        raise CommandError("--max-in-flight values must be 1 or more", 2)
    peers: list[str] = []
    if args.compare:
        from ._bench_peers import available

        peers = available()
        missing = {"pynsq", "gnsq"} - set(peers)
        if missing:
            print(f"not installed, skipped: {', '.join(sorted(missing))}")
    stop = gevent.event.Event()
    with stop_on_signals(stop):
        job = gevent.spawn(_capture, args, flights, peers)
        job.link(lambda _: stop.set())
        stop.wait()
        if not job.ready():
            job.kill()
            print("interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        error = job.get()
        if error is not None:
            raise error
    return 0


def _capture(args: Any, flights: list[int], peers: list[str]) -> Exception | None:
    """Run the benchmarks; the error is returned (a failed greenlet would print it)."""
    try:
        _run_all(args, flights, peers)
    except Exception as exc:
        return exc
    return None


def _run_all(args: Any, flights: list[int], peers: list[str]) -> None:
    if args.nsqd_tcp_address:
        address = normalize_address(args.nsqd_tcp_address, "nsqd TCP")
        check_nsqd_tcp(address)
        _run_workloads(address, args, flights, peers)
        return
    from ..testing.servers import NsqdServer

    with NsqdServer(bin_dir="") as server:  # the embedded broker, in its own process
        _run_workloads(server.tcp_address, args, flights, peers)


def _run_workloads(address: str, args: Any, flights: list[int], peers: list[str]) -> None:
    body = b"m" * args.size
    clients = ["gnsqlite", *peers]
    run_id = f"{os.getpid()}_{int(time.time())}"
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cores; nsqd {address};"
        f" {args.messages:,} messages of {args.size} bytes a run"
    )
    columns = "".join(f"{c:>12}" for c in clients)
    if args.which in ("all", "publish"):
        print(f"{'publish':<24}{columns}")
        for mode in PUBLISH_MODES:
            rates = {}
            for client in clients:
                topic = f"bench_pub_{mode}_{client}_{run_id}"
                pub = publish_rate if client == "gnsqlite" else _peer_publish(client)
                rates[client] = args.messages / pub(address, topic, body, args.messages, mode)
            _print_row(_MODE_NAMES[mode], rates)
    if args.which in ("all", "consume"):
        print(f"{'consume':<24}{columns}")
        for mif in flights:
            rates = {}
            for client in clients:
                topic = f"bench_sub_{mif}_{client}_{run_id}"
                queue_messages(address, topic, body, args.messages)
                sub = consume_rate if client == "gnsqlite" else _peer_consume(client)
                rates[client] = args.messages / sub(address, topic, args.messages, mif)
            _print_row(f"max_in_flight={mif}", rates)
    print("figures are messages per second; higher is better")


def _print_row(name: str, rates: dict[str, float]) -> None:
    cells = "".join(f"{r:>12,.0f}" for r in rates.values())
    ours = rates["gnsqlite"]
    ratios = ", ".join(f"x{ours / r:.2f} vs {c}" for c, r in rates.items() if c != "gnsqlite")
    print(f"{name:<24}{cells}" + (f"   ({ratios})" if ratios else ""), flush=True)


def _peer_publish(name: str) -> Callable[[str, str, bytes, int, str], float]:
    from ._bench_peers import PUBLISH

    return PUBLISH[name]


def _peer_consume(name: str) -> Callable[[str, str, int, int], float]:
    from ._bench_peers import CONSUME

    return CONSUME[name]
