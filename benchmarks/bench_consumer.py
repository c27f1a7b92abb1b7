"""Consume rate with a no-op handler: gnsqlite vs pynsq's Reader vs gnsq's Consumer.

Not a test: run it by hand, ``python benchmarks/bench_consumer.py``. It starts
the embedded nsqd in a subprocess (its own core), and for each
``max_in_flight`` (1, 100, 2500) and each client it publishes a fresh topic
of messages, then times the client from start until every message was
handled and finished. The three clients meet the same broker in the same
run, one after the other, and the ratios are printed.

``--profile`` runs gnsqlite's consumer under cProfile and prints the top
entries (cumulative and own time).

``--instrument N`` measures what :func:`gnsqlite.metrics.instrument` costs:
N runs of gnsqlite alone with a plain consumer and N with an instrumented one
(scraped once a second while it runs), alternating so both see the same
machine, then the median of each and the difference: the wall-clock rate,
and the consumer process's CPU time per message (``time.process_time()``;
the broker runs in another process), which other load on a shared machine
disturbs less.
``--multiprocess`` does the same in prometheus_client's multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR`` set to a temporary directory)::

    python benchmarks/bench_consumer.py --instrument 5 --max-in-flight 100
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import gevent

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
    parser.add_argument(
        "--instrument",
        type=int,
        default=0,
        metavar="N",
        help="N alternating runs plain vs gnsqlite.metrics.instrument()",
    )
    parser.add_argument(
        "--multiprocess",
        action="store_true",
        help="with --instrument: prometheus_client's multiprocess mode",
    )
    args = parser.parse_args()
    if args.multiprocess:  # before prometheus_client is imported
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="bench_metrics_")
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
        if args.instrument:
            for mif in (int(x) for x in args.max_in_flight.split(",")):
                count = args.messages_rdy1 if mif == 1 else args.messages
                _overhead(server, mif, count, args.instrument)
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


def _overhead(server: NsqdServer, mif: int, count: int, runs: int) -> None:
    """Print the median consume rate plain and instrumented, from alternating runs."""
    from prometheus_client import CollectorRegistry

    from gnsqlite.metrics import exposition, instrument, multiprocess_mode

    scrapers: list[gevent.Greenlet[Any, Any]] = []
    links: list[Any] = []

    def instrumented(consumer: Any) -> None:
        registry = CollectorRegistry()
        links.append(instrument(consumer, registry))

        def scrape() -> None:
            while True:
                exposition(registry)
                gevent.sleep(1.0)

        scrapers.append(gevent.spawn(scrape))

    rates: dict[str, list[float]] = {"plain": [], "instrumented": []}
    cpu: dict[str, list[float]] = {"plain": [], "instrumented": []}  # µs per message
    for run in range(2 * runs):
        kind = ("plain", "instrumented")[run % 2]
        topic = f"bench_overhead_{mif}_{run}"
        queue_messages(server.tcp_address, topic, BODY, count)
        wait_until(lambda t=topic: _depth(server, t) == count, timeout=60)
        prepare = instrumented if kind == "instrumented" else None
        cpu_start = time.process_time()
        try:
            seconds = consume_rate(server.tcp_address, topic, count, mif, prepare=prepare)
        finally:
            gevent.killall(scrapers)
            scrapers.clear()
            for link in links:
                link.close()  # in multiprocess mode: its sync timer stops
            links.clear()
        cpu[kind].append(1e6 * (time.process_time() - cpu_start) / count)
        rates[kind].append(count / seconds)
    plain, inst = (statistics.median(rates[k]) for k in ("plain", "instrumented"))
    plain_cpu, inst_cpu = (statistics.median(cpu[k]) for k in ("plain", "instrumented"))
    added = _hook_ns()
    mode = "multiprocess" if multiprocess_mode() else "single-process"
    print(
        f"max_in_flight={mif:<5} {count:>7,} msgs, {runs} runs each ({mode}):\n"
        f"  rate: plain {plain:,.0f} msg/s, instrumented {inst:,.0f} msg/s,"
        f" overhead {100 * (plain - inst) / plain:+.1f}%"
        f"  (plain {_numbers(rates['plain'])}; instrumented {_numbers(rates['instrumented'])})\n"
        f"  CPU: plain {plain_cpu:.2f} µs/msg, instrumented {inst_cpu:.2f} µs/msg,"
        f" overhead {100 * (inst_cpu - plain_cpu) / plain_cpu:+.1f}%"
        f"  (plain {_numbers(cpu['plain'], 2)}; instrumented {_numbers(cpu['instrumented'], 2)})\n"
        f"  per message, the handler timing adds {added:.0f} ns (timeit, best of 5),"
        f" {100 * added / 1000 / plain_cpu:.1f}% of the plain CPU per message"
    )


def _hook_ns() -> float:
    """Nanoseconds the instrumented handler path adds per message, in isolation.

    The same steps as ``Consumer._process`` with and without a timing hook
    (two clock reads and the bucket update), minus the uninstrumented path.
    """
    import timeit

    from gnsqlite.metrics import HANDLER_BUCKETS, _Buckets

    def path(timing: Any, clock: Callable[[], float] = time.perf_counter) -> None:
        started = clock() if timing is not None else 0.0
        if timing is not None:
            timing(clock() - started)

    hook = _Buckets(HANDLER_BUCKETS).observe
    number = 1_000_000

    def best(timing: Any) -> float:
        return min(timeit.repeat(lambda: path(timing), number=number, repeat=5)) / number * 1e9

    return best(hook) - best(None)


def _numbers(values: list[float], digits: int = 0) -> str:
    return ", ".join(f"{v:,.{digits}f}" for v in values)


def _depth(server: NsqdServer, topic: str) -> int:
    for t in server.stats().get("topics", []):
        if t["topic_name"] == topic:
            return int(t["depth"])
    return 0


if __name__ == "__main__":
    main()
