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
import logging
import os
import pstats
import sys
from collections.abc import Callable

from gnsqlite.cli._bench_peers import CONSUME
from gnsqlite.cli.bench import consume_rate, queue_messages
from gnsqlite.testing import NsqdServer, wait_until

BODY = b"x" * 100

#: client -> ``seconds(address, topic, count, max_in_flight)``; the same code as `gnsqlite bench`
CLIENTS: dict[str, Callable[[str, str, int, int], float]] = {"gnsqlite": consume_rate, **CONSUME}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000, help="per run at RDY 100/2500")
    parser.add_argument("--messages-rdy1", type=int, default=5_000, help="per run at RDY 1")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--max-in-flight", default="1,100,2500")
    parser.add_argument("--profile", action="store_true", help="profile gnsqlite at RDY 2500")
    args = parser.parse_args()
    clients = [c for c in args.clients.split(",") if c]
    logging.getLogger("nsq").setLevel(logging.CRITICAL)  # pynsq's noise when it closes
    server = NsqdServer()
    server.start()
    try:
        print(
            f"python {sys.version.split()[0]}, {os.cpu_count()} cores, broker {server.tcp_address}"
        )
        if args.profile:
            topic = "bench_profile"
            queue_messages(server.tcp_address, topic, BODY, args.messages)
            profile = cProfile.Profile()
            profile.enable()
            elapsed = consume_rate(server.tcp_address, topic, args.messages, 2500)
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
                queue_messages(server.tcp_address, topic, BODY, count)
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
