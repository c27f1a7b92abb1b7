"""Batch handlers (``Consumer(batch_handler=...)``) against a live nsqd, embedded or real.

Every test accounts for each message exactly: which batch it was in, how
often it was handled, and what nsqd says of the channel afterwards (finished
means drained with no requeue and no timeout; requeued messages show in
``requeue_count``).
"""

from __future__ import annotations

import collections
import math
import time
from functools import partial
from typing import Any

import gevent
import gevent.event
import pytest

from gnsqlite import ConfigError
from gnsqlite.consumer import Consumer
from gnsqlite.consumer.batch import Batcher
from gnsqlite.flow.rdy import STARVATION_RATIO
from gnsqlite.http import NsqdHTTPClient
from gnsqlite.message import Message
from gnsqlite.testing import NsqdServer, wait_until
from gnsqlite.testing.faults import live_greenlets
from gnsqlite.timers import TimerWheel

TOPIC = "batch_test"
CHANNEL = "ch"


def publish(server: NsqdServer, bodies: list[bytes], topic: str = TOPIC) -> None:
    NsqdHTTPClient(server.http_address, timeout=10.0).mpub(topic, bodies)


def drained(server: NsqdServer, topic: str = TOPIC) -> bool:
    return server.channel_drained(topic, CHANNEL)


def channel(server: NsqdServer, topic: str = TOPIC) -> dict[str, Any]:
    return server.channel_stats(topic, CHANNEL)


def answered_after_close(server: NsqdServer, expected: tuple[int, int, int]) -> dict[str, Any]:
    """The channel's stats once (requeue, in flight, depth) is ``expected``; waits up to 5 s.

    close() returns once the answers are written; nsqd reads and applies them
    from its own loop, so its stats may lag by a moment. An answer never sent
    would keep its message in flight until nsqd's msg_timeout (60 s), far past
    this wait.
    """

    def reached() -> dict[str, Any] | None:
        stats = channel(server)
        counts = (stats["requeue_count"], stats["in_flight_count"], stats["depth"])
        return stats if counts == expected else None

    found = wait_until(reached, timeout=5, message=f"(requeue, in flight, depth) == {expected}")
    assert found is not None  # wait_until returns only a truthy value
    return found


def bodies(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


class Recorder:
    """A batch handler that records each batch (bodies, attempts, nsqd, time)."""

    def __init__(self) -> None:
        self.batches: list[list[Message]] = []
        self.times: list[float] = []
        self.handed = gevent.event.Event()

    def __call__(self, messages: list[Message]) -> None:
        self.batches.append(list(messages))
        self.times.append(time.monotonic())
        self.handed.set()

    def sizes(self) -> list[int]:
        return [len(b) for b in self.batches]

    def handled(self) -> list[bytes]:
        return sorted(m.body for b in self.batches for m in b)


def batch_consumer(
    consumers: list[Consumer],
    server: NsqdServer | list[NsqdServer],
    handler: Any,
    topic: str = TOPIC,
    **options: Any,
) -> Consumer:
    """A Consumer with ``batch_handler=handler`` on ``server``, closed after the test."""
    servers = server if isinstance(server, list) else [server]
    consumer = Consumer(
        topic,
        CHANNEL,
        batch_handler=handler,
        nsqd_tcp_addresses=[s.tcp_address for s in servers],
        **options,
    )
    consumers.append(consumer)
    return consumer


def batch_stats(consumer: Consumer) -> dict[str, Any]:
    stats: dict[str, Any] = consumer.stats()["batches"]
    return stats


@pytest.mark.no_server
def test_batch_options_are_checked_and_the_constructor_starts_nothing() -> None:
    consumer = partial(Consumer, TOPIC, CHANNEL, nsqd_tcp_addresses="127.0.0.1:1")
    before = live_greenlets()
    consumer(batch_handler=print, batch_size=10, max_in_flight=10)
    assert live_greenlets() == before
    with pytest.raises(
        ConfigError,
        match=r"max_in_flight=5 is below batch_size=10.*raise"
        r" max_in_flight to 10 or more",
    ):
        consumer(batch_handler=print, batch_size=10, max_in_flight=5)
    with pytest.raises(ConfigError, match="handler and batch_handler given together: pass one"):
        consumer(print, batch_handler=print, batch_size=1)
    with pytest.raises(ConfigError, match="batch_handler needs batch_size=N"):
        consumer(batch_handler=print)
    with pytest.raises(ConfigError, match="batch_size and batch_timeout given without"):
        consumer(print, batch_size=5, batch_timeout=1.0)
    with pytest.raises(ConfigError, match=r"batch_size=0 is out of range: use 1 or more"):
        consumer(batch_handler=print, batch_size=0)
    with pytest.raises(ConfigError, match=r"batch_timeout=0 is out of range: use 0.001 s"):
        consumer(batch_handler=print, batch_size=1, batch_timeout=0)
    with pytest.raises(ConfigError, match="batch_handler=3 must be callable"):
        consumer(batch_handler=3, batch_size=1)  # type: ignore[arg-type]  # wrong type on purpose


def test_full_batches(nsqd: NsqdServer, consumers: list[Consumer]) -> None:
    # 50 messages never starve max_in_flight=100 (85 would): every batch is full.
    published = bodies("f", 50)
    publish(nsqd, published)
    recorder = Recorder()
    consumer = batch_consumer(
        consumers, nsqd, recorder, batch_size=10, batch_timeout=60.0, max_in_flight=100
    )
    consumer.start()
    wait_until(lambda: drained(nsqd) and len(recorder.batches) == 5, timeout=10)
    assert recorder.sizes() == [10] * 5
    assert recorder.handled() == sorted(published)  # each once
    assert all(m.attempts == 1 for b in recorder.batches for m in b)
    assert batch_stats(consumer)["handed_over"] == {"full": 5, "timeout": 0, "starved": 0}
    stats = channel(nsqd)
    assert (stats["requeue_count"], stats["timeout_count"]) == (0, 0)
    assert consumer.stats()["totals"]["finished"] == 50


def test_a_batch_that_does_not_fill_is_handed_over_after_batch_timeout(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    recorder = Recorder()
    consumer = batch_consumer(
        consumers, nsqd, recorder, batch_size=10, batch_timeout=0.5, max_in_flight=100
    )
    consumer.start()
    assert consumer.connected.wait(10)
    started = time.monotonic()
    publish(nsqd, bodies("t", 7))
    assert recorder.handed.wait(10)
    assert recorder.times[0] - started >= 0.5  # not before the timeout
    wait_until(lambda: drained(nsqd), timeout=10)
    assert recorder.sizes() == [7]
    assert batch_stats(consumer)["handed_over"] == {"full": 0, "timeout": 1, "starved": 0}
    assert channel(nsqd)["requeue_count"] == 0


def test_a_starved_consumer_hands_its_batch_over_at_once(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    # max_in_flight == batch_size == 20: the guide's is_starved holds once 85%
    # of the RDY (17 of 20) is in flight, and then the batch goes at once, long
    # before its timeout. 16 in flight do not starve it: nsqd could send 4
    # more, so that batch waits for the timeout (or for more messages).
    size = 20
    starving = math.ceil(size * STARVATION_RATIO)
    assert starving == 17
    recorder = Recorder()
    consumer = batch_consumer(
        consumers, nsqd, recorder, batch_size=size, batch_timeout=60.0, max_in_flight=size
    )
    publish(nsqd, bodies("s", starving))
    started = time.monotonic()
    consumer.start()
    assert recorder.handed.wait(10)
    assert recorder.times[0] - started < 30.0
    wait_until(lambda: drained(nsqd), timeout=10)
    assert recorder.sizes() == [starving]
    assert batch_stats(consumer)["handed_over"] == {"full": 0, "timeout": 0, "starved": 1}

    fewer = Recorder()
    other = batch_consumer(
        consumers,
        nsqd,
        fewer,
        topic="batch_test2",
        batch_size=size,
        batch_timeout=1.0,
        max_in_flight=size,
    )
    publish(nsqd, bodies("u", starving - 1), topic="batch_test2")
    other.start()
    wait_until(lambda: fewer.batches and drained(nsqd, "batch_test2"), timeout=10)
    assert fewer.sizes() == [starving - 1]
    assert batch_stats(other)["handed_over"] == {"full": 0, "timeout": 1, "starved": 0}


def test_a_raising_batch_is_requeued_with_backoff_and_redelivered(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    published = bodies("r", 10)
    publish(nsqd, published)
    seen: list[tuple[bytes, int]] = []
    failed = gevent.event.Event()

    def handle(messages: list[Message]) -> None:
        seen.extend((m.body, m.attempts) for m in messages)
        if any(m.attempts == 1 for m in messages):
            failed.set()
            raise RuntimeError("database down")

    consumer = batch_consumer(
        consumers,
        nsqd,
        handle,
        batch_size=10,
        batch_timeout=0.2,
        max_in_flight=20,
        requeue_delay=0.0,
    )
    consumer.start()
    assert failed.wait(10)
    # The failure counts once toward backoff, as one failing single message would.
    wait_until(lambda: consumer.stats()["backoff"]["state"] != "normal", timeout=5)
    assert consumer.stats()["backoff"]["level"] == 1
    wait_until(lambda: drained(nsqd) and len(seen) == 20, timeout=15)
    assert sorted(seen) == sorted([(b, 1) for b in published] + [(b, 2) for b in published])
    stats = channel(nsqd)
    assert (stats["requeue_count"], stats["timeout_count"]) == (10, 0)


def test_messages_the_handler_answered_itself_are_skipped(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    publish(nsqd, bodies("p", 6))
    seen: list[tuple[bytes, int]] = []
    kept: list[Message] = []

    def handle(messages: list[Message]) -> None:
        seen.extend((m.body, m.attempts) for m in messages)
        by_body = {m.body: m for m in messages}
        if messages[0].attempts == 1:
            assert by_body[b"p0"].finish() is True
            assert by_body[b"p1"].requeue(0.0, backoff=False) is True
            raise RuntimeError("the rest fail")  # p2..p5 requeued; p0, p1 left alone
        if b"p3" in by_body:  # the second round: p3 is answered later, the rest on return
            by_body[b"p3"].enable_async()
            kept.append(by_body[b"p3"])

    consumer = batch_consumer(
        consumers,
        nsqd,
        handle,
        batch_size=6,
        batch_timeout=0.3,
        max_in_flight=12,
        requeue_delay=0.0,
        backoff=None,
    )
    consumer.start()
    wait_until(lambda: len(seen) == 11 and channel(nsqd)["in_flight_count"] == 1, timeout=15)
    assert sorted(seen) == sorted(
        [(b"p%d" % i, 1) for i in range(6)] + [(b"p%d" % i, 2) for i in range(1, 6)]
    )
    (late,) = kept
    assert not late.has_responded
    assert late.finish() is True
    wait_until(lambda: drained(nsqd), timeout=10)
    stats = channel(nsqd)
    assert (stats["requeue_count"], stats["timeout_count"]) == (5, 0)


def test_batches_mix_two_nsqd_and_answer_each_on_its_own_connection(
    nsqd_factory: Any, consumers: list[Consumer]
) -> None:
    servers = [nsqd_factory(), nsqd_factory()]
    for n, server in enumerate(servers):
        publish(server, bodies(f"n{n}-", 5))
    recorder = Recorder()
    consumer = batch_consumer(
        consumers, servers, recorder, batch_size=10, batch_timeout=10.0, max_in_flight=40
    )
    consumer.start()
    wait_until(
        lambda: len(recorder.handled()) == 10 and all(drained(s) for s in servers), timeout=15
    )
    assert recorder.handled() == sorted(bodies("n0-", 5) + bodies("n1-", 5))
    mixed = [b for b in recorder.batches if len({m.nsqd for m in b}) == 2]
    assert mixed, f"no batch held messages of both nsqd: {recorder.sizes()}"
    # A FIN on the wrong connection would leave the message in flight there.
    for server in servers:
        stats = channel(server)
        assert (stats["requeue_count"], stats["timeout_count"]) == (0, 0)
    per_conn = {c["address"]: c["finished"] for c in consumer.stats()["connections"]}
    assert sorted(per_conn.values()) == [5, 5]


def test_a_long_batch_is_touched_and_never_times_out(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    # msg_timeout=1 s (IDENTIFY): the batch waits 1.5 s to be handed over and
    # its handler takes 2.5 s more; touches keep nsqd from timing it out.
    published = bodies("l", 3)
    seen: list[tuple[bytes, int]] = []

    def handle(messages: list[Message]) -> None:
        seen.extend((m.body, m.attempts) for m in messages)
        gevent.sleep(2.5)  # the work itself: a slow database

    consumer = batch_consumer(
        consumers, nsqd, handle, batch_size=10, batch_timeout=1.5, max_in_flight=10, msg_timeout=1.0
    )
    consumer.start()
    assert consumer.connected.wait(10)
    assert consumer.connections[0].msg_timeout == 1.0
    publish(nsqd, published)
    wait_until(lambda: drained(nsqd), timeout=15)
    assert sorted(seen) == [(b, 1) for b in published]
    assert channel(nsqd)["timeout_count"] == 0
    assert batch_stats(consumer)["touches"] >= 2 * len(published)


def test_max_attempts_gives_up_per_message(nsqd: NsqdServer, consumers: list[Consumer]) -> None:
    publish(nsqd, [b"poison"])
    given_up: list[tuple[bytes, int]] = []
    handled: list[tuple[bytes, int]] = []

    def handle(messages: list[Message]) -> None:
        handled.extend((m.body, m.attempts) for m in messages)
        if any(m.body == b"poison" for m in messages):
            raise ValueError("poison in the batch")

    consumer = batch_consumer(
        consumers,
        nsqd,
        handle,
        batch_size=5,
        batch_timeout=0.1,
        max_in_flight=5,
        max_attempts=2,
        requeue_delay=0.0,
        backoff=None,
        on_giving_up=lambda m: given_up.append((m.body, m.attempts)),
    )
    consumer.start()
    wait_until(lambda: given_up and drained(nsqd), timeout=10)
    publish(nsqd, [b"fine"])
    wait_until(lambda: (b"fine", 1) in handled and drained(nsqd), timeout=10)
    assert given_up == [(b"poison", 3)]
    assert sorted(handled) == [(b"fine", 1), (b"poison", 1), (b"poison", 2)]
    assert channel(nsqd)["requeue_count"] == 2


def test_close_requeues_the_batch_being_collected_and_leaves_nothing(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    recorder = Recorder()
    consumer = batch_consumer(
        consumers, nsqd, recorder, batch_size=10, batch_timeout=60.0, max_in_flight=100
    )
    publish(nsqd, bodies("c", 4))  # first: nothing it leaves behind is the consumer's
    before = live_greenlets()
    consumer.start()
    wait_until(lambda: batch_stats(consumer)["pending"] == 4, timeout=10)
    batcher = consumer._batcher
    assert isinstance(batcher, Batcher)
    wheel = TimerWheel.for_hub()
    assert wheel.owned_by(batcher)  # the batch timeout and the touch timer
    consumer.close(timeout=5.0)
    assert recorder.batches == []  # never handed over
    answered_after_close(nsqd, (4, 0, 4))
    assert wheel.owned_by(batcher) == [] and wheel.owned_by(consumer) == []
    wait_until(lambda: live_greenlets() <= before, timeout=5, message="consumer greenlets ended")

    # The requeued messages come back whole to the next consumer.
    again = Recorder()
    second = batch_consumer(
        consumers, nsqd, again, batch_size=4, batch_timeout=60.0, max_in_flight=8
    )
    second.start()
    wait_until(lambda: drained(nsqd), timeout=10)
    assert again.handled() == sorted(bodies("c", 4))
    assert collections.Counter(m.attempts for b in again.batches for m in b) == {2: 4}


def test_close_lets_a_running_batch_finish_and_answer(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    publish(nsqd, bodies("d", 3))
    started = gevent.event.Event()
    release = gevent.event.Event()
    handled: list[bytes] = []

    def handle(messages: list[Message]) -> None:
        started.set()
        assert release.wait(10)
        handled.extend(m.body for m in messages)

    consumer = batch_consumer(
        consumers, nsqd, handle, batch_size=2, batch_timeout=60.0, max_in_flight=10
    )
    consumer.start()
    assert started.wait(10)
    wait_until(lambda: batch_stats(consumer)["pending"] == 1, timeout=10)
    closing = gevent.spawn(consumer.close, 10.0)
    wait_until(lambda: channel(nsqd)["requeue_count"] == 1, timeout=10)  # the pending one
    assert not closing.dead  # close waits for the running batch
    release.set()
    closing.get(timeout=10)
    assert len(handled) == 2
    stats = answered_after_close(nsqd, (1, 0, 1))
    assert stats["timeout_count"] == 0
