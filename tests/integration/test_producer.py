"""Producer against running nsqd (the embedded broker, or the real one)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import gevent
import gevent.monkey
import pytest
from recording_proxy import RecordingProxy
from test_conn import Subscriber

import gnsqlite.producer.pool
from gnsqlite.connection import Connection
from gnsqlite.errors import (
    BadMessageError,
    BrokenConnectionError,
    InvalidNameError,
    NoConnectionsError,
)
from gnsqlite.producer import Producer
from gnsqlite.testing.waiting import wait_until
from gnsqlite.timers import TimerQueue, TimerWheel


@pytest.fixture
def subscribers() -> Iterator[list[Subscriber]]:
    made: list[Subscriber] = []
    yield made
    for sub in made:
        sub.close()


def test_publish_multi_publish_and_defer_reach_a_consumer(
    nsqd: Any, subscribers: list[Subscriber]
) -> None:
    sub = Subscriber(nsqd.tcp_address, "orders")
    subscribers.append(sub)
    with Producer(nsqd.tcp_address) as producer:
        producer.publish("orders", b"a")
        producer.publish("orders", "é")
        producer.multi_publish("orders", [b"b", b"c"])
        producer.publish("orders", b"later", defer=0.3)
        result = producer.publish_async("orders", b"async")
        assert result.get(timeout=5) == b"OK"
        mpub = producer.multi_publish_async("orders", [b"m1", b"m2"])
        assert mpub.get(timeout=5) == b"OK"
        bodies = sub.wait_for(8)
    assert sorted(bodies) == sorted(
        [b"a", "é".encode(), b"b", b"c", b"later", b"async", b"m1", b"m2"]
    )
    assert bodies[-1] == b"later"


def test_the_test_process_is_not_monkey_patched() -> None:
    # Every test here runs unpatched: the client must not need patching.
    assert not gevent.monkey.is_module_patched("socket")
    assert not gevent.monkey.is_module_patched("ssl")


def test_a_monkey_patched_process_works_too(nsqd: Any) -> None:
    code = textwrap.dedent(
        f"""
        from gevent import monkey

        monkey.patch_all()
        from gnsqlite.producer import Producer

        with Producer({nsqd.tcp_address!r}, snappy=True) as producer:
            producer.publish("patched", b"hello")
            producer.multi_publish("patched", [b"a", b"b"])
        print("published")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.strip() == b"published"
    (topic,) = nsqd.stats(topic="patched")["topics"]
    assert topic["message_count"] == 3


def test_100_greenlets_publish_concurrently_on_one_connection(
    nsqd: Any, subscribers: list[Subscriber]
) -> None:
    sub = Subscriber(nsqd.tcp_address, "burst", rdy=500)
    subscribers.append(sub)
    proxy = RecordingProxy(nsqd.tcp_address).start()
    try:
        with Producer(proxy.address) as producer:
            answered: list[bytes] = []

            def publisher(i: int) -> None:
                for j in range(3):
                    body = b"%d-%d" % (i, j)
                    producer.publish("burst", body)
                    answered.append(body)

            gevent.joinall([gevent.spawn(publisher, i) for i in range(100)], raise_error=True)
            assert len(producer.connections) == 1
        expected = sorted(b"%d-%d" % (i, j) for i in range(100) for j in range(3))
        assert sorted(answered) == expected
        assert sorted(sub.wait_for(300)) == expected
        # One connection, pipelined: many PUBs were in flight at once.
        assert {r.conn for r in proxy.records} == {0}
    finally:
        proxy.stop()


def test_an_idle_producer_answers_heartbeats_and_stays_connected(nsqd: Any) -> None:
    proxy = RecordingProxy(nsqd.tcp_address).start()
    try:
        with Producer(proxy.address, heartbeat_interval=1.0) as producer:
            (conn,) = producer.connections
            # nsqd would drop a client that misses two heartbeats; after four
            # intervals the same connection is alive and has answered each.
            assert proxy.wait_for(lambda: len(proxy.lines(prefix=b"NOP")) >= 4, timeout=8)
            assert producer.connections == (conn,)
            assert conn.is_connected
            producer.publish("idle", b"still here")
        assert len({r.conn for r in proxy.records}) == 1
    finally:
        proxy.stop()


def test_failover_when_one_of_two_nsqd_stops_mid_stream(nsqd_factory: Any) -> None:
    first = nsqd_factory()
    second = nsqd_factory()
    for server in (first, second):
        server.http.create_topic("stream")
        server.http.create_channel("stream", "ch")
    acked: list[bytes] = []
    producer = Producer(
        [first.tcp_address, second.tcp_address], reconnect_interval=0.1, timeout=10.0
    )
    producer.start()
    try:
        wait_until(lambda: len(producer.connections) == 2)

        def publish_forever() -> None:
            i = 0
            while True:
                body = b"%06d" % i
                producer.publish("stream", body)
                acked.append(body)
                i += 1

        publishers = [gevent.spawn(publish_forever) for _ in range(5)]
        wait_until(lambda: len(acked) >= 300, timeout=10)
        first.stop()  # persists what it holds, like nsqd on SIGTERM
        count = len(acked)
        wait_until(lambda: len(acked) >= count + 300, timeout=10)
        assert len(producer.connections) == 1
        gevent.killall(publishers)
    finally:
        producer.close()
    first.start()  # same ports and data: what it acknowledged is still there
    received: set[bytes] = set()
    subs = [Subscriber(s.tcp_address, "stream", rdy=1000) for s in (first, second)]
    try:
        wait_until(lambda: set(acked) <= {b for s in subs for b in s.bodies}, timeout=15)
        received = {b for s in subs for b in s.bodies}
    finally:
        for sub in subs:
            sub.close()
    assert set(acked) <= received


def test_invalid_topics_fail_locally_and_server_errors_are_raised(nsqd_factory: Any) -> None:
    server = nsqd_factory(max_msg_size=100)
    with Producer(server.tcp_address, reconnect_interval=0.05) as producer:
        with pytest.raises(InvalidNameError, match="bad/topic"):
            producer.publish("bad/topic", b"x")
        with pytest.raises(InvalidNameError):
            producer.multi_publish("x" * 65, [b"x"])
        # Our limit says 1 MiB; this nsqd refuses more than 100 bytes.
        with pytest.raises(BadMessageError) as info:
            producer.publish("big", b"x" * 200)
        assert info.value.code == "E_BAD_MESSAGE"
        assert "200" in str(info.value)
        # nsqd closed that connection; the producer reconnects and goes on.
        producer.publish("big", b"x" * 100)


def test_every_nsqd_down_raises_naming_each(nsqd_factory: Any) -> None:
    first = nsqd_factory()
    second = nsqd_factory()
    producer = Producer([first.tcp_address, second.tcp_address], timeout=0.5)
    producer.start()
    try:
        producer.publish("t", b"x")
        first.stop()
        second.stop()
        with pytest.raises(NoConnectionsError) as info:
            producer.publish("t", b"x")
        assert set(info.value.errors) == {first.tcp_address, second.tcp_address}
    finally:
        producer.close()
    assert producer.join(1)


class _FakeClockWheel:
    """The producer's timers on a fake clock: the test decides when they are due."""

    def __init__(self) -> None:
        self.now = 0.0
        self.queue = TimerQueue()
        self.delays: list[float] = []

    def call_later(self, delay: float, callback: Any, *args: Any, owner: object) -> Any:
        self.delays.append(delay)
        return self.queue.schedule(self.now + delay, callback, args, owner=owner)

    def cancel_owner(self, owner: object) -> int:
        return self.queue.cancel_owner(owner)

    def advance(self) -> None:
        """Move the clock to the next deadline and run what is due there."""
        deadline = self.queue.next_deadline()
        assert deadline is not None, "nothing is scheduled"
        self.now = deadline
        for timer in self.queue.pop_due(self.now):
            timer.fire()


def test_a_producer_reconnects_after_5000_failed_attempts(
    nsqd: Any, subscribers: list[Subscriber], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before the fix, failure 1025 overflowed the backoff formula inside the
    # reconnect greenlet and the address was never tried again.
    failures = 5000
    attempts = []

    class Refusing(Connection):
        def connect(self) -> dict[str, Any]:
            attempts.append(self.name)
            if len(attempts) <= failures:
                raise BrokenConnectionError(self.name, "connect failed: refused (scripted)")
            return super().connect()

    wheel = _FakeClockWheel()
    monkeypatch.setattr(gnsqlite.producer.pool, "Connection", Refusing)
    monkeypatch.setattr(TimerWheel, "for_hub", lambda: wheel)
    producer = Producer(nsqd.tcp_address, reconnect_interval=1.0, max_reconnect_interval=60.0)
    try:
        producer.start()
        while len(attempts) <= failures:
            wheel.advance()
            producer.join()  # the reconnect attempt the timer spawned
        assert len(attempts) == failures + 1
        assert len(producer.connections) == 1
        delays = wheel.delays
        assert len(delays) == failures
        assert all(30.0 <= d <= 60.0 for d in delays[7:])  # capped, never overflowing
        assert wheel.now > 30.0 * (failures - 7)  # about three days of outage on the fake clock
        sub = Subscriber(nsqd.tcp_address, "outage")
        subscribers.append(sub)
        producer.publish("outage", b"back")
        assert sub.wait_for(1) == [b"back"]
    finally:
        producer.close()


def test_a_publish_timing_hook_that_raises_is_logged_and_loses_nothing(
    nsqd: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A faulty ``set_publish_timing`` hook (a metrics exporter's bug) costs a log line.

    The hook runs where the answers are read, several per read when publishes
    are pipelined: raising there once ended the connection with the other
    answers of that read unset, so their publishes were retried (duplicates)
    or failed although nsqd had taken them.
    """
    with Producer(nsqd.tcp_address) as producer:

        def timing(topic: str, command: str, seconds: float) -> None:
            raise ValueError("a metrics bug")

        producer.set_publish_timing(timing)
        (conn,) = producer.connections
        results = [producer.publish_async("timed", b"%d" % i) for i in range(50)]
        gevent.wait(results, timeout=10)
        assert [r.get(block=False) for r in results] == [b"OK"] * 50
        producer.multi_publish("timed", [b"a", b"b"])
        assert producer.connections == (conn,) and conn.is_connected
    assert nsqd.topic_stats("timed")["message_count"] == 52
    assert any(
        "a metrics bug" in r.getMessage() or (r.exc_info and "a metrics bug" in str(r.exc_info[1]))
        for r in caplog.records
    )
