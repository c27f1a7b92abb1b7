"""Where RDY goes across three nsqd, with the default options: issues 17 and 27, measured.

Not a test: run it by hand. It starts three nsqd (embedded, or the real ones
with ``GNSQLITE_NSQD=/path/to/nsq/bin``) and runs, every consumer with the
default options but for ``max_in_flight``:

1. ``max_in_flight=1``, 400 msg/s published steadily into each nsqd for
   ``--seconds`` (60): messages consumed per nsqd, each nsqd's longest time
   without a delivery, and the least served nsqd's share of the fair share
   (targets: >= 1/3, and 5 s);
2. ``max_in_flight=30``, one nsqd of three with a backlog, a 10 ms handler:
   msg/s from second 3 after the start over ``--window`` seconds (target:
   >= 0.8 of 3,000), and msg/s in every second from the start; with
   ``--baseline``, the same consumer on that nsqd alone first (30 in flight,
   nothing to share);
3. ``max_in_flight`` of ``--max-in-flight`` (100 and 2500), equal backlogs
   (``--backlog`` each), a no-op handler: msg/s to drain them all, and the most
   nsqd held in flight (their ``/stats``, sampled every 10 ms);
4. ``max_in_flight=30``, a 10 ms handler, traffic moving from one nsqd to
   another: a backlog (``--before``) on the first, and a new one on the second
   as the first runs dry; msg/s in each second after the first's last message
   (target: >= 0.8 of 3,000 from second 3).

``PYTHONPATH=<checkout>`` picks the gnsqlite to measure, so the same script
compares two versions::

    GNSQLITE_NSQD=../shared/nsq/bin PYTHONPATH=. python benchmarks/bench_rdy.py --scenarios 1,2,3,4
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from typing import Any

import gevent
import gevent.event

from gnsqlite.consumer import Consumer
from gnsqlite.http import NsqdHTTPClient
from gnsqlite.message import Message
from gnsqlite.testing import NsqdServer, wait_until

CHANNEL = "bench"


def publish(server: NsqdServer, topic: str, count: int) -> None:
    client = NsqdHTTPClient(server.http_address, timeout=30.0)
    for start in range(0, count, 1000):
        client.mpub(topic, [b"x" * 100] * min(1000, count - start))


def steady(server: NsqdServer, topic: str, per_second: int, stop: gevent.event.Event) -> None:
    client = NsqdHTTPClient(server.http_address, timeout=10.0)
    batch, sent, started = max(1, per_second // 20), 0, time.monotonic()
    while not stop.is_set():
        client.mpub(topic, [b"x"] * batch)
        sent += batch
        stop.wait(max(0.0, started + sent / per_second - time.monotonic()))


def consumer(topic: str, handler: Any, servers: list[NsqdServer], **options: Any) -> Consumer:
    return Consumer(
        topic, CHANNEL, handler, nsqd_tcp_addresses=[s.tcp_address for s in servers], **options
    )


def in_flight(server: NsqdServer, topic: str) -> int:
    return int(server.channel_stats(topic, CHANNEL).get("in_flight_count", 0))


def scenario1(servers: list[NsqdServer], seconds: float) -> None:
    topic = "rdy1"
    for s in servers:
        publish(s, topic, 1)
    arrivals: dict[str, list[float]] = collections.defaultdict(list)
    c = consumer(
        topic, lambda m: arrivals[m.nsqd].append(time.monotonic()), servers, max_in_flight=1
    )
    stop = gevent.event.Event()
    pubs = [gevent.spawn(steady, s, topic, 400, stop) for s in servers]
    c.start()
    wait_until(lambda: len(c.connections) == 3, timeout=10)
    start = time.monotonic()
    gevent.sleep(seconds)
    end = time.monotonic()
    stop.set()
    gevent.joinall(pubs)
    c.close()
    print(f"1. max_in_flight=1, 400 msg/s into each of 3 nsqd, {seconds:.0f} s, default options:")
    counts = {}
    for s in servers:
        times = [t for t in arrivals[s.tcp_address] if start <= t <= end]
        counts[s.tcp_address] = len(times)
        gaps = [b - a for a, b in zip([start, *times], [*times, end], strict=True)]
        print(f"   {s.tcp_address}: {len(times):7,} messages, longest wait {max(gaps):5.2f} s")
    fair = sum(counts.values()) / 3
    print(f"   least served: {min(counts.values()) / fair:.2f} of the fair share (target >= 0.33)")


def per_second(times: list[float], start: float, seconds: int) -> list[int]:
    """How many of ``times`` fall in each second from ``start``."""
    counts = [0] * seconds
    for t in times:
        i = int(t - start)
        if 0 <= i < seconds:
            counts[i] += 1
    return counts


def sleepy(arrivals: list[float]) -> Any:
    def handle(message: Message) -> None:
        gevent.sleep(0.01)
        arrivals.append(time.monotonic())

    return handle


def scenario2(servers: list[NsqdServer], window: float, baseline: bool) -> None:
    groups = (
        (("alone", servers[:1]), ("1 busy of 3", servers))
        if baseline
        else (("1 busy of 3", servers),)
    )
    for label, group in groups:
        topic = f"rdy2_{len(group)}"
        publish(group[0], topic, int(3500 * (window + 5)))
        for s in group[1:]:
            publish(s, topic, 1)
        done: list[float] = []
        c = consumer(topic, sleepy(done), group, max_in_flight=30)
        started = time.monotonic()
        c.start()
        gevent.sleep(3.0 + window)
        rdys = [(x["last_rdy"], x.get("rdy_reason", "")) for x in c.stats()["connections"]]
        c.close()
        rate = sum(1 for t in done if started + 3.0 <= t < started + 3.0 + window) / window
        seconds = per_second(done, started, int(3 + window))
        share = rate / 3000
        print(
            f"2. max_in_flight=30, 10 ms handler, {label}, default options: {rate:7,.0f} msg/s"
            f" from second 3 to {3 + window:.0f} ({share:.2f} of 3,000), RDY {rdys}"
        )
        print(f"   per second from the start: {seconds}")


def scenario3(servers: list[NsqdServer], backlog: int, max_in_flight: int) -> None:
    topic = f"rdy3_{max_in_flight}"
    for s in servers:
        publish(s, topic, backlog)
    done = gevent.event.Event()
    count = [0]

    def handle(message: Message) -> None:
        count[0] += 1
        if count[0] == 3 * backlog:
            done.set()

    peak = [0]

    def sample() -> None:
        while True:
            peak[0] = max(peak[0], sum(in_flight(s, topic) for s in servers))
            gevent.sleep(0.01)

    c = consumer(topic, handle, servers, max_in_flight=max_in_flight)
    sampler = gevent.spawn(sample)
    started = time.monotonic()
    c.start()
    done.wait()
    elapsed = time.monotonic() - started
    sampler.kill()
    c.close()
    print(
        f"3. max_in_flight={max_in_flight}, 3 x {backlog:,} backlog, default options:"
        f" {3 * backlog / elapsed:7,.0f} msg/s, most in flight at nsqd {peak[0]}"
    )


def scenario4(servers: list[NsqdServer], before: int) -> None:
    """Traffic moves from one nsqd to another: msg/s per second after the move."""
    topic = "rdy4"
    first, second, third = servers
    publish(first, topic, before)
    publish(second, topic, 1)
    publish(third, topic, 1)
    done: list[float] = []
    arrivals: dict[str, list[float]] = collections.defaultdict(list)

    def handle(message: Message) -> None:
        gevent.sleep(0.01)
        arrivals[message.nsqd].append(time.monotonic())
        done.append(time.monotonic())

    c = consumer(topic, handle, servers, max_in_flight=30)
    c.start()
    # The move: a backlog lands on the second nsqd as the first runs dry.
    wait_until(lambda: len(arrivals[first.tcp_address]) >= before - 600, timeout=120)
    publish(second, topic, 3500 * 8)
    wait_until(lambda: len(arrivals[first.tcp_address]) >= before, timeout=30)
    moved = arrivals[first.tcp_address][-1]
    gevent.sleep(6.0)
    rdys = [(x["last_rdy"], x.get("rdy_reason", "")) for x in c.stats()["connections"]]
    c.close()
    seconds = per_second(done, moved, 6)
    print(
        f"4. max_in_flight=30, 10 ms handler, traffic moves to another nsqd, default options:"
        f" msg/s in each second after the move {seconds}; from second 3:"
        f" {min(seconds[3:]) / 3000:.2f} of 3,000 at least, RDY {rdys}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="1,2,3")
    parser.add_argument("--seconds", type=float, default=60.0, help="scenario 1's run")
    parser.add_argument("--window", type=float, default=10.0, help="scenario 2's measured window")
    parser.add_argument("--backlog", type=int, default=50_000, help="scenario 3, per nsqd")
    parser.add_argument("--max-in-flight", default="100,2500", help="scenario 3's budgets")
    parser.add_argument("--baseline", action="store_true", help="scenario 2 on one nsqd too")
    parser.add_argument("--before", type=int, default=30_000, help="scenario 4's first backlog")
    args = parser.parse_args()
    servers = [NsqdServer() for _ in range(3)]
    for s in servers:
        s.start()
    try:
        import gnsqlite

        where = os.environ.get("GNSQLITE_NSQD") or "embedded"
        print(
            f"gnsqlite from {os.path.dirname(gnsqlite.__file__)}, nsqd: {where},"
            f" python {sys.version.split()[0]}, {os.cpu_count()} cores"
        )
        wanted = set(args.scenarios.split(","))
        if "1" in wanted:
            scenario1(servers, args.seconds)
        if "2" in wanted:
            scenario2(servers, args.window, args.baseline)
        if "3" in wanted:
            for budget in args.max_in_flight.split(","):
                scenario3(servers, args.backlog, int(budget))
        if "4" in wanted:
            scenario4(servers, args.before)
    finally:
        for s in servers:
            s.close()


if __name__ == "__main__":
    main()
