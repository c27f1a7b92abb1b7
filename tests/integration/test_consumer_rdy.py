"""Where RDY goes, against three live nsqd (embedded, or real with GNSQLITE_NSQD): issues 17, 27.

1. ``max_in_flight=1`` and steady traffic into every nsqd, default options:
   RDY rotates, so every nsqd is served within the stated bound (seconds,
   :func:`~gnsqlite.flow.rdy.rotation_bound`; a turn its nsqd left unused,
   unscheduled on a loaded machine, does not count) and none is starved.
2. ``max_in_flight=30``, one nsqd of three has messages, default options:
   that connection gets the budget the idle ones leave within three seconds
   of the start, and nsqd sees it used.
3. ``max_in_flight=100``, equal backlogs: even shares, and nsqd never holds
   more than 100 in flight for the consumer.

Speed is measured by ``benchmarks/bench_rdy.py``; these tests check where RDY
goes and what nsqd holds, read from ``stats()`` and nsqd's ``/stats``.
"""

from __future__ import annotations

import collections
import itertools
import time
from functools import partial

import gevent
import gevent.event

from gnsqlite.config import ConsumerConfig
from gnsqlite.consumer import Consumer
from gnsqlite.flow.rdy import rotation_bound
from gnsqlite.http import NsqdHTTPClient
from gnsqlite.message import Message
from gnsqlite.testing import HubStalls, NsqdServer, wait_until
from gnsqlite.testing.plugin import NsqCluster

TOPIC = "rdy_test"
CHANNEL = "ch"


def publish(server: NsqdServer, bodies: list[bytes]) -> None:
    client = NsqdHTTPClient(server.http_address, timeout=10.0)
    for start in range(0, len(bodies), 500):
        client.mpub(TOPIC, bodies[start : start + 500])


def in_flight(server: NsqdServer) -> int:
    """nsqd's in-flight count for the channel (0 before the consumer created it)."""
    return int(server.channel_stats(TOPIC, CHANNEL).get("in_flight_count", 0))


def steady_publisher(server: NsqdServer, per_second: int, stop: gevent.event.Event) -> None:
    """Publish ``per_second`` messages a second into ``server`` until ``stop`` is set."""
    client = NsqdHTTPClient(server.http_address, timeout=10.0)
    batch = max(1, per_second // 20)
    started = time.monotonic()
    sent = 0
    while not stop.is_set():
        client.mpub(TOPIC, [b"x"] * batch)
        sent += batch
        # Keep the rate over the whole run even when a round trip was slow.
        stop.wait(max(0.0, started + sent / per_second - time.monotonic()))


def holding(samples: list[tuple[float, dict[str, int]]], address: str, a: float, b: float) -> float:
    """Seconds of ``[a, b]`` the samples show ``address`` holding RDY (each until the next)."""
    held = 0.0
    for (t0, rdy), (t1, _) in itertools.pairwise(samples):
        if rdy.get(address, 0) > 0:
            held += max(0.0, min(b, t1) - max(a, t0))
    return held


def test_scarce_rdy_serves_every_busy_nsqd_in_turn(
    nsq_cluster: NsqCluster, consumers: list[Consumer]
) -> None:
    servers = nsq_cluster.nsqds
    for server in servers:
        publish(server, [b"first"])  # the topic exists, so lookupd lists every nsqd
    run = 12.0  # a dozen turns of the default second each
    arrivals: dict[str, list[float]] = collections.defaultdict(list)
    consumer = Consumer(  # the default options, but for max_in_flight (a pynsq user's 1)
        TOPIC,
        CHANNEL,
        lambda m: arrivals[m.nsqd].append(time.monotonic()),
        lookupd_http_addresses=[nsq_cluster.lookupd.http_address],
        max_in_flight=1,
    )
    consumers.append(consumer)
    stop = gevent.event.Event()
    publishers = [gevent.spawn(steady_publisher, s, 200, stop) for s in servers]
    try:
        consumer.start()
        wait_until(lambda: len(consumer.connections) == 3, timeout=10, message="three nsqd")
        start = time.monotonic()
        reasons: set[tuple[str, ...]] = set()
        # (when, the RDY each nsqd held then), every 0.1 s: when each nsqd had its turn.
        samples: list[tuple[float, dict[str, int]]] = []
        while time.monotonic() - start < run:
            conns = consumer.stats()["connections"]
            samples.append((time.monotonic(), {c["address"]: c["last_rdy"] for c in conns}))
            assert sum(c["last_rdy"] for c in conns) <= 1
            reasons.add(tuple(sorted(c["rdy_reason"] for c in conns)))
            gevent.sleep(0.1)
        end = time.monotonic()
    finally:
        stop.set()
        gevent.joinall(publishers, timeout=10, raise_error=True)
    assert ("rotation", "waiting", "waiting") in reasons
    defaults = ConsumerConfig()
    bound = rotation_bound(3, 1, defaults.low_rdy_timeout, defaults.rdy_redistribute_interval)
    assert bound == 3.0  # two turns of one interval, +0.5 s each
    counts = {}
    for server in servers:
        times = [t for t in arrivals[server.tcp_address] if start <= t <= end]
        counts[server.tcp_address] = len(times)
        assert times, f"{server.tcp_address} was never served"
        spans = list(zip([start, *times], [*times, end], strict=True))
        # The time between two of its messages that it spent waiting for RDY:
        # less what it held RDY (a turn its nsqd used for nothing: a loaded
        # machine can leave an nsqd unscheduled for a whole turn).
        waits = [b - a - holding(samples, server.tcp_address, a, b) for a, b in spans]
        # The target (5 s): the bound, and 2 s for answers and late timers.
        assert max(waits) <= bound + 2.0, (
            server.tcp_address,
            max(waits),
            max(b - a for a, b in spans),
            bound,
        )
    # Busy nsqd share the turns evenly: the time each held RDY (how much an
    # nsqd sends in its turns is its own speed, and a loaded machine's).
    held = {s.tcp_address: holding(samples, s.tcp_address, start, end) for s in servers}
    fair = sum(held.values()) / 3
    assert min(held.values()) >= fair / 3, (held, counts)


def test_the_busy_nsqd_gets_the_budget_the_idle_ones_leave(
    nsq_cluster: NsqCluster, consumers: list[Consumer]
) -> None:
    busy, *idle = nsq_cluster.nsqds
    publish(busy, [b"b%d" % i for i in range(40000)])
    for server in idle:
        publish(server, [b"i"])  # one each: they are known, then empty

    def handle(message: Message) -> None:
        gevent.sleep(0.01)

    consumer = Consumer(  # the default options, but for max_in_flight
        TOPIC,
        CHANNEL,
        handle,
        nsqd_tcp_addresses=[s.tcp_address for s in nsq_cluster.nsqds],
        max_in_flight=30,
    )
    consumers.append(consumer)
    # A loaded machine's delays are not the client's: the hub's stalls are measured.
    with HubStalls() as stalls:
        started = time.monotonic()
        consumer.start()

        def allocation() -> dict[str, tuple[int, str]]:
            conns = consumer.stats()["connections"]
            return {c["address"]: (c["last_rdy"], c["rdy_reason"]) for c in conns}

        wait_until(lambda: len(allocation()) == 3, timeout=10, message="three connections")
        # Two evaluations (1 s each): the larger share at the first, granted at the
        # next, when what nsqd might still have sent the idle ones is accounted for.
        wait_until(
            lambda: allocation().get(busy.tcp_address) == (28, "demand"),
            timeout=10,
            message="the busy connection holds 28 of 30",
        )
        took = time.monotonic() - started
    # By second 3 on the client's clock: the time its hub did not run is not its own.
    assert took - stalls.late <= 3.0, (
        f"the budget reached the messages at {took:.2f} s ({stalls.late:.2f} s of stalls)"
    )
    assert [allocation()[s.tcp_address] for s in idle] == [(1, "idle"), (1, "idle")]
    # nsqd sees the budget used: most of 30 in flight on the busy one.
    wait_until(lambda: in_flight(busy) >= 25, timeout=10, message="25+ in flight at nsqd")
    assert sum(in_flight(s) for s in nsq_cluster.nsqds) <= 30

    # The other nsqd wake up: within an evaluation or two they get their shares back.
    for server in idle:
        publish(server, [b"w%d" % i for i in range(5000)])
    wait_until(
        lambda: sorted(rdy for rdy, _ in allocation().values()) == [10, 10, 10],
        timeout=10,
        message="even shares once all three have messages",
    )
    assert {reason for _, reason in allocation().values()} == {"even"}


def test_equal_backlogs_never_hold_more_than_max_in_flight(
    nsq_cluster: NsqCluster, consumers: list[Consumer]
) -> None:
    servers = nsq_cluster.nsqds
    per_server = 10000
    for server in servers:
        publish(server, [b"e%d" % i for i in range(per_server)])
    handled: list[int] = [0]

    def handle(message: Message) -> None:
        gevent.sleep(0.005)
        handled[0] += 1

    consumer = Consumer(
        TOPIC,
        CHANNEL,
        handle,
        nsqd_tcp_addresses=[s.tcp_address for s in servers],
        max_in_flight=100,
        rdy_redistribute_interval=0.2,
    )
    consumers.append(consumer)
    samples: list[int] = []
    held: list[int] = []

    def sample_nsqd() -> None:
        while True:
            samples.append(sum(in_flight(s) for s in servers))
            gevent.sleep(0.01)

    def sample_consumer() -> None:
        while True:
            held.append(consumer.stats()["totals"]["in_flight"])
            gevent.sleep(0.001)

    consumer.start()
    samplers = [gevent.spawn(sample_nsqd), gevent.spawn(sample_consumer)]
    try:
        wait_until(lambda: handled[0] >= 3 * per_server, timeout=60, message="every message")
    finally:
        gevent.killall(samplers)
    assert len(samples) > 20
    assert max(samples) <= 100, max(samples)
    assert max(held) <= 100, max(held)
    for server in servers:
        wait_until(partial(server.channel_drained, TOPIC, CHANNEL), timeout=10)
