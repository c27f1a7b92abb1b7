"""Consume rate with a no-op handler: gnsqlite vs pynsq's Reader vs gnsq's Consumer.

Not a test: run it by hand, ``python benchmarks/bench_consumer.py``. It starts
the embedded nsqd in a subprocess (its own core), and for each
``max_in_flight`` (1, 100, 2500) and each client it publishes a fresh topic
of messages, then times the client from start until every message was
handled and finished. The three clients meet the same broker in the same
run, one after the other, and the ratios are printed.

``--profile`` runs gnsqlite's consumer under cProfile and prints the top
entries (cumulative and own time).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import socket
import struct
import sys
import time
from collections.abc import Callable

from gnsqlite.testing import NsqdServer, wait_until

BODY = b"x" * 100


def publish(tcp_address: str, topic: str, count: int) -> None:
    """MPUB ``count`` 100-byte messages over a plain socket, 1,000 at a time."""
    host, port = tcp_address.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"  V2")
        left = count
        while left:
            n = min(1000, left)
            body = struct.pack(">I", n) + b"".join(
                struct.pack(">I", len(BODY)) + BODY for _ in range(n)
            )
            sock.sendall(b"MPUB %s\n" % topic.encode() + struct.pack(">I", len(body)) + body)
            reply = b""
            while len(reply) < 10:
                reply += sock.recv(64)
            if reply[8:10] != b"OK":
                raise RuntimeError(f"MPUB failed: {reply!r}")
            left -= n


def run_gnsqlite(address: str, topic: str, count: int, max_in_flight: int) -> float:
    import gevent.event

    from gnsqlite.consumer import Consumer

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
    )
    start = time.perf_counter()
    consumer.start()
    if not done.wait(600):
        raise RuntimeError(f"gnsqlite handled only {handled} of {count}")
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def run_pynsq(address: str, topic: str, count: int, max_in_flight: int) -> float:
    import nsq
    import tornado.ioloop

    loop = tornado.ioloop.IOLoop.current()
    handled = 0

    def handle(message: object) -> bool:
        nonlocal handled
        handled += 1
        if handled == count:
            loop.add_callback(loop.stop)
        return True

    start = time.perf_counter()
    reader = nsq.Reader(
        topic=topic,
        channel="bench",
        message_handler=handle,
        nsqd_tcp_addresses=[address],
        max_in_flight=max_in_flight,
    )
    loop.call_later(600, loop.stop)
    loop.start()
    elapsed = time.perf_counter() - start
    reader.close()
    if handled < count:
        raise RuntimeError(f"pynsq handled only {handled} of {count}")
    return elapsed


def run_gnsq(address: str, topic: str, count: int, max_in_flight: int) -> float:
    import gevent.event
    import gnsq

    done = gevent.event.Event()
    handled = 0
    consumer = gnsq.Consumer(
        topic,
        "bench",
        nsqd_tcp_addresses=[address],
        max_in_flight=max_in_flight,
    )

    @consumer.on_message.connect
    def handle(_consumer: object, message: object) -> None:
        nonlocal handled
        handled += 1
        if handled == count:
            done.set()

    start = time.perf_counter()
    consumer.start(block=False)
    if not done.wait(600):
        raise RuntimeError(f"gnsq handled only {handled} of {count}")
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


CLIENTS: dict[str, Callable[[str, str, int, int], float]] = {
    "gnsqlite": run_gnsqlite,
    "pynsq": run_pynsq,
    "gnsq": run_gnsq,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000, help="per run at RDY 100/2500")
    parser.add_argument("--messages-rdy1", type=int, default=5_000, help="per run at RDY 1")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--max-in-flight", default="1,100,2500")
    parser.add_argument("--profile", action="store_true", help="profile gnsqlite at RDY 2500")
    args = parser.parse_args()
    clients = [c for c in args.clients.split(",") if c]
    server = NsqdServer()
    server.start()
    try:
        print(
            f"python {sys.version.split()[0]}, {os.cpu_count()} cores, broker {server.tcp_address}"
        )
        if args.profile:
            topic = "bench_profile"
            publish(server.tcp_address, topic, args.messages)
            profile = cProfile.Profile()
            profile.enable()
            elapsed = run_gnsqlite(server.tcp_address, topic, args.messages, 2500)
            profile.disable()
            print(f"gnsqlite RDY 2500: {args.messages / elapsed:,.0f} msg/s under the profiler")
            stats = pstats.Stats(profile)
            stats.sort_stats("tottime").print_stats(15)
            return
        for mif in (int(x) for x in args.max_in_flight.split(",")):
            count = args.messages_rdy1 if mif == 1 else args.messages
            rates: dict[str, float] = {}
            for client in clients:
                topic = f"bench_{client}_{mif}"
                publish(server.tcp_address, topic, count)
                wait_until(lambda t=topic, n=count: _depth(server, t) == n, timeout=60)
                rates[client] = count / CLIENTS[client](server.tcp_address, topic, count, mif)
            line = ", ".join(f"{c} {r:,.0f} msg/s" for c, r in rates.items())
            ours = rates.get("gnsqlite")
            ratios = ", ".join(
                f"x{ours / r:.2f} vs {c}" for c, r in rates.items() if ours and c != "gnsqlite"
            )
            print(f"max_in_flight={mif:<5} {count:>7,} msgs: {line}  ({ratios})")
    finally:
        server.stop()


def _depth(server: NsqdServer, topic: str) -> int:
    for t in server.stats().get("topics", []):
        if t["topic_name"] == topic:
            return int(t["depth"])
    return 0


if __name__ == "__main__":
    main()
