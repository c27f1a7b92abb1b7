"""Where RDY goes across three nsqd: issue 17's three scenarios, measured.

Not a test: run it by hand. It starts three nsqd (embedded, or the real ones
with ``GNSQLITE_NSQD=/path/to/nsq/bin``) and runs:

1. ``max_in_flight=1``, 400 msg/s published steadily into each nsqd for
   ``--seconds`` (60): messages consumed per nsqd, and each nsqd's longest
   time without a delivery;
2. ``max_in_flight=30``, one nsqd of three with a backlog, a 10 ms handler:
   msg/s over ``--window`` seconds, and the same consumer on that nsqd alone
   (the baseline: 30 in flight, nothing to share);
3. ``max_in_flight=100``, equal backlogs (``--backlog`` each), a no-op
   handler: msg/s to drain them all, and the most nsqd held in flight (their
   ``/stats``, sampled every 10 ms).

``PYTHONPATH=<checkout>`` picks the gnsqlite to measure, so the same script
compares two versions. ``low_rdy_timeout`` is set only where the version has it.
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

from gnsqlite.config import ConsumerConfig
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
    if "low_rdy_timeout" not in ConsumerConfig.option_names():
        options.pop("low_rdy_timeout", None)
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
        topic,
        lambda m: arrivals[m.nsqd].append(time.monotonic()),
        servers,
        max_in_flight=1,
        rdy_redistribute_interval=1.0,
        low_rdy_idle_timeout=2.0,
        low_rdy_timeout=2.0,
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
    print(f"1. max_in_flight=1, 400 msg/s into each of 3 nsqd, {seconds:.0f} s:")
    for s in servers:
        times = [t for t in arrivals[s.tcp_address] if start <= t <= end]
        gaps = [b - a for a, b in zip([start, *times], [*times, end], strict=True)]
        print(f"   {s.tcp_address}: {len(times):7,} messages, longest wait {max(gaps):5.2f} s")


def scenario2(servers: list[NsqdServer], window: float) -> None:
    def handle(message: Message) -> None:
        gevent.sleep(0.01)

    for label, group in (("alone", servers[:1]), ("1 busy of 3", servers)):
        topic = f"rdy2_{len(group)}"
        publish(group[0], topic, int(4000 * (window + 5)))
        for s in group[1:]:
            publish(s, topic, 1)
        c = consumer(topic, handle, group, max_in_flight=30, rdy_redistribute_interval=1.0)
        c.start()
        gevent.sleep(3.0)  # connect, warm up, a few evaluations
        before = c.stats()["totals"]["finished"]
        gevent.sleep(window)
        rate = (c.stats()["totals"]["finished"] - before) / window
        rdys = [(x["last_rdy"], x.get("rdy_reason", "")) for x in c.stats()["connections"]]
        c.close()
        print(f"2. max_in_flight=30, 10 ms handler, {label}: {rate:7,.0f} msg/s, RDY {rdys}")


def scenario3(servers: list[NsqdServer], backlog: int) -> None:
    topic = "rdy3"
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

    c = consumer(topic, handle, servers, max_in_flight=100, rdy_redistribute_interval=1.0)
    sampler = gevent.spawn(sample)
    started = time.monotonic()
    c.start()
    done.wait()
    elapsed = time.monotonic() - started
    sampler.kill()
    c.close()
    print(
        f"3. max_in_flight=100, 3 x {backlog:,} backlog: {3 * backlog / elapsed:7,.0f} msg/s,"
        f" most in flight at nsqd {peak[0]}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="1,2,3")
    parser.add_argument("--seconds", type=float, default=60.0, help="scenario 1's run")
    parser.add_argument("--window", type=float, default=10.0, help="scenario 2's measured window")
    parser.add_argument("--backlog", type=int, default=50_000, help="scenario 3, per nsqd")
    args = parser.parse_args()
    servers = [NsqdServer() for _ in range(3)]
    for s in servers:
        s.start()
    try:
        import gnsqlite

        where = os.environ.get("GNSQLITE_NSQD") or "embedded"
        print(f"gnsqlite from {os.path.dirname(gnsqlite.__file__)}, nsqd: {where},"
              f" python {sys.version.split()[0]}, {os.cpu_count()} cores")  # fmt: skip
        wanted = set(args.scenarios.split(","))
        if "1" in wanted:
            scenario1(servers, args.seconds)
        if "2" in wanted:
            scenario2(servers, args.window)
        if "3" in wanted:
            scenario3(servers, args.backlog)
    finally:
        for s in servers:
            s.close()


if __name__ == "__main__":
    main()
