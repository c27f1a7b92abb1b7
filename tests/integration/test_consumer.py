"""The Consumer against a live nsqd (embedded, or real with GNSQLITE_NSQD).

The broker is observed only through its TCP protocol, its HTTP API and a
recording proxy, so these tests hold for a real nsqd as well.
"""

from __future__ import annotations

import collections
import logging
import time
from functools import partial
from typing import Any

import gevent
import gevent.event
import gevent.hub
import pytest
from recording_proxy import RecordingProxy

from gnsqlite import ConfigError
from gnsqlite.consumer import Consumer
from gnsqlite.flow import ExponentialBackoff
from gnsqlite.http import NsqdHTTPClient
from gnsqlite.message import Message, RequeueMessage
from gnsqlite.testing import NsqdServer, wait_until
from gnsqlite.testing.faults import live_greenlets
from gnsqlite.timers import TimerWheel

TOPIC = "consumer_test"
CHANNEL = "ch"


def publish(server: NsqdServer, bodies: list[bytes], topic: str = TOPIC) -> None:
    client = NsqdHTTPClient(server.http_address, timeout=10.0)
    for start in range(0, len(bodies), 500):
        client.mpub(topic, bodies[start : start + 500])


def channel_stats(server: NsqdServer, topic: str = TOPIC, channel: str = CHANNEL) -> dict[str, Any]:
    return server.channel_stats(topic, channel)


def drained(server: NsqdServer, topic: str = TOPIC, channel: str = CHANNEL) -> bool:
    return server.channel_drained(topic, channel)


def test_constructor_validates_and_starts_nothing() -> None:
    before = live_greenlets()
    consumer = Consumer(TOPIC, CHANNEL, lambda m: None, nsqd_tcp_addresses=["127.0.0.1:1"])
    assert live_greenlets() == before
    assert consumer.connections == []
    with pytest.raises(ConfigError, match="give at least one address"):
        Consumer(TOPIC, CHANNEL, lambda m: None)
    with pytest.raises(ConfigError, match="max_in_flight=-1"):
        Consumer(TOPIC, CHANNEL, nsqd_tcp_addresses="127.0.0.1:1", max_in_flight=-1)
    with pytest.raises(ConfigError, match=r"unknown option 'max_inflight'.*'max_in_flight'"):
        Consumer(TOPIC, CHANNEL, nsqd_tcp_addresses="127.0.0.1:1", max_inflight=3)
    with pytest.raises(ConfigError, match="nsqd_tcp_addresses"):
        Consumer(TOPIC, CHANNEL, nsqd_tcp_addresses="nohost")
    with pytest.raises(ValueError, match="topic name 'bad topic'"):
        Consumer("bad topic", CHANNEL, nsqd_tcp_addresses="127.0.0.1:1")


def test_messages_are_handled_and_finished(nsqd: NsqdServer, consumers: list[Consumer]) -> None:
    publish(nsqd, [b"m%d" % i for i in range(200)])
    seen: list[bytes] = []
    consumer = Consumer(
        TOPIC,
        CHANNEL,
        lambda m: seen.append(m.body),
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=20,
    )
    observed: list[bytes] = []
    consumer.add_message_observer(lambda m: observed.append(m.body))
    # a broken observer changes nothing; the ignore: add_message_observer is typed
    # Callable[[Message], None] though it ignores what an observer returns (a library typing flaw)
    consumer.add_message_observer(lambda m: 1 / 0)  # a broken observer changes nothing
    consumers.append(consumer)
    before = time.time()
    assert not consumer.connected.is_set()
    consumer.start()
    assert consumer.connected.wait(10)  # set once a connection is subscribed
    wait_until(lambda: len(seen) == 200, timeout=20)
    assert sorted(seen) == sorted(b"m%d" % i for i in range(200))
    assert sorted(observed) == sorted(seen)
    wait_until(lambda: drained(nsqd), timeout=10)
    stats = consumer.stats()
    assert stats["totals"]["finished"] == 200
    assert stats["totals"]["received"] == 200
    assert stats["connections"][0]["address"] == consumer.connections[0].name
    last = stats["connections"][0]["last_message_time"]  # wall-clock seconds
    assert before - 0.5 <= last <= time.time() + 0.5
    consumer.close()
    assert not consumer.connected.is_set()


def test_ten_thousand_across_three_brokers_within_max_in_flight(
    nsq_cluster: Any, consumers: list[Consumer]
) -> None:
    per_broker = 10_000 // 3 + 1
    expected: set[bytes] = set()
    for index, server in enumerate(nsq_cluster.nsqds):
        bodies = [b"%d-%d" % (index, i) for i in range(per_broker)]
        expected.update(bodies)
        publish(server, bodies)
    counts: collections.Counter[bytes] = collections.Counter()

    def handle(message: Message) -> None:
        counts[message.body] += 1
        gevent.sleep(0)

    consumer = Consumer(
        TOPIC,
        CHANNEL,
        handle,
        lookupd_http_addresses=[nsq_cluster.lookupd.http_address],
        max_in_flight=50,
        concurrency=20,
        lookupd_poll_interval=0.5,
    )
    consumers.append(consumer)
    consumer.start()
    worst = 0

    def sample() -> bool:
        nonlocal worst
        total = 0
        for server in nsq_cluster.nsqds:
            for client in channel_stats(server).get("clients", []):
                assert client["in_flight_count"] <= 50
                total += client["in_flight_count"]
        worst = max(worst, total)
        assert total <= 50
        return len(counts) == len(expected)

    wait_until(sample, timeout=90, interval=0.05)
    assert set(counts) == expected
    assert max(counts.values()) == 1, "a message was handled twice"
    for server in nsq_cluster.nsqds:
        wait_until(partial(drained, server), timeout=10)
    assert len(consumer.connections) == 3
    assert 0 < worst <= 50


def test_handler_exception_requeues_then_succeeds(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    publish(nsqd, [b"flaky"])
    attempts: list[int] = []

    def handle(message: Message) -> None:
        attempts.append(message.attempts)
        if message.attempts < 3:
            raise RuntimeError("not yet")

    consumer = Consumer(
        TOPIC,
        CHANNEL,
        handle,
        nsqd_tcp_addresses=nsqd.tcp_address,
        requeue_delay=0.0,
        backoff=ExponentialBackoff(0.05),
    )
    consumers.append(consumer)
    consumer.start()
    wait_until(lambda: drained(nsqd) and attempts == [1, 2, 3], timeout=10)
    assert channel_stats(nsqd)["requeue_count"] == 2


def test_requeue_message_with_delay_and_async_answers(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    publish(nsqd, [b"later", b"async"])
    log: list[tuple[bytes, int]] = []
    pending: list[Message] = []

    def handle(message: Message) -> None:
        log.append((message.body, message.attempts))
        if message.body == b"later" and message.attempts == 1:
            raise RequeueMessage(delay=0.2, backoff=False)
        if message.body == b"async":
            message.enable_async()
            pending.append(message)

    consumer = Consumer(
        TOPIC, CHANNEL, handle, nsqd_tcp_addresses=nsqd.tcp_address, max_in_flight=5
    )
    consumers.append(consumer)
    consumer.start()
    wait_until(lambda: (b"later", 2) in log and pending, timeout=10)
    (message,) = pending
    assert not message.has_responded
    assert channel_stats(nsqd)["in_flight_count"] == 1  # the async one waits for us
    done = gevent.spawn(message.finish)
    assert done.get(timeout=5) is True
    assert message.finish() is False  # answering twice does nothing, and says so
    assert message.requeue() is False
    wait_until(lambda: drained(nsqd), timeout=10)
    assert log.count((b"async", 1)) == 1


def test_touch_keeps_a_slow_message_alive_past_the_timeout(
    nsqd_factory: Any, consumers: list[Consumer]
) -> None:
    server = nsqd_factory(msg_timeout=2.0)
    publish(server, [b"slow"])
    deliveries: list[int] = []

    def handle(message: Message) -> None:
        deliveries.append(message.attempts)
        assert message.time_left() <= 2.0
        for _ in range(7):  # 3.5 s in all, touching every 0.5 s
            gevent.sleep(0.5)
            assert message.touch() is True

    consumer = Consumer(TOPIC, CHANNEL, handle, nsqd_tcp_addresses=server.tcp_address)
    consumers.append(consumer)
    consumer.start()
    # Delivered first: the channel made by SUB is empty until nsqd moves the topic's
    # message into it, so "drained" alone can be true before the message arrives.
    wait_until(lambda: deliveries and drained(server), timeout=15)
    assert deliveries == [1]
    assert channel_stats(server)["timeout_count"] == 0


def test_giving_up_after_max_attempts(
    nsqd: NsqdServer, consumers: list[Consumer], caplog: pytest.LogCaptureFixture
) -> None:
    publish(nsqd, [b"poison", b"custom"])
    given_up: list[tuple[bytes, int]] = []

    def handle(message: Message) -> None:
        raise ValueError("always fails")

    def on_giving_up(message: Message) -> None:
        given_up.append((message.body, message.attempts))

    consumer = Consumer(
        TOPIC,
        CHANNEL,
        handle,
        nsqd_tcp_addresses=nsqd.tcp_address,
        max_attempts=2,
        requeue_delay=0.0,
        backoff=None,
        on_giving_up=on_giving_up,
        max_in_flight=2,
    )
    consumers.append(consumer)
    consumer.start()
    wait_until(lambda: len(given_up) == 2 and drained(nsqd), timeout=10)
    assert sorted(given_up) == [(b"custom", 3), (b"poison", 3)]

    # The default hook logs a warning with the id, attempts and a body preview.
    publish(nsqd, [b"x" * 100], topic="consumer_test2")
    caplog.set_level(logging.WARNING, logger="gnsqlite.consumer")
    default = Consumer(
        "consumer_test2",
        CHANNEL,
        handle,
        nsqd_tcp_addresses=nsqd.tcp_address,
        max_attempts=1,
        requeue_delay=0.0,
        backoff=None,
    )
    consumers.append(default)
    default.start()
    wait_until(lambda: "giving up on message" in caplog.text, timeout=10)
    wait_until(lambda: drained(nsqd, topic="consumer_test2"), timeout=10)
    assert "after 2 attempts" in caplog.text
    assert repr(b"x" * 64) + "..." in caplog.text  # a preview, not the whole body


def test_backoff_episode_command_sequence(nsqd: NsqdServer, consumers: list[Consumer]) -> None:
    proxy = RecordingProxy(nsqd.tcp_address).start()
    try:
        publish(nsqd, [b"fail-once"])
        handled = gevent.event.Event()

        def handle(message: Message) -> None:
            if message.attempts == 1:
                raise RuntimeError("first attempt fails")
            handled.set()

        consumer = Consumer(
            TOPIC,
            CHANNEL,
            handle,
            nsqd_tcp_addresses=proxy.address,
            max_in_flight=5,
            requeue_delay=0.0,
            backoff=ExponentialBackoff(0.3),
        )
        consumers.append(consumer)
        consumer.start()
        assert handled.wait(10)
        assert proxy.wait_for(
            lambda: (
                proxy.lines(prefix=b"RDY")[-1:] == [b"RDY 5"]
                and len(proxy.lines(prefix=b"FIN")) == 1
            )
        )
        lines = [line for line in proxy.lines() if line.split(b" ")[0] in (b"RDY", b"REQ", b"FIN")]
        assert len(lines) == 7, lines
        assert lines[:3] == [b"RDY 1", b"RDY 5", b"RDY 0"]  # RDY 0 before the REQ
        assert lines[3].startswith(b"REQ ") and lines[3].endswith(b" 0")
        assert lines[4] == b"RDY 1"  # the window is over: test the waters
        assert lines[5].startswith(b"FIN ")  # the probe succeeded ...
        assert lines[6] == b"RDY 5"  # ... so the full flow returns
        window = [r.at for r in proxy.records if r.line in (b"RDY 0", b"RDY 1")][-2:]
        assert window[1] - window[0] >= 0.25  # RDY 1 waited for the 0.3 s window
    finally:
        proxy.stop()


def test_max_in_flight_one_drains_all_three_brokers(
    nsq_cluster: Any, consumers: list[Consumer]
) -> None:
    for index, server in enumerate(nsq_cluster.nsqds):
        publish(server, [b"%d-%d" % (index, i) for i in range(10)])
    seen: set[bytes] = set()
    consumer = Consumer(
        TOPIC,
        CHANNEL,
        lambda m: seen.add(m.body),
        nsqd_tcp_addresses=[s.tcp_address for s in nsq_cluster.nsqds],
        max_in_flight=1,
        low_rdy_idle_timeout=0.2,
        rdy_redistribute_interval=0.1,
    )
    consumers.append(consumer)
    consumer.start()
    wait_until(lambda: len(seen) == 30, timeout=30)
    assert consumer.stats()["totals"]["last_rdy"] <= 1
    for server in nsq_cluster.nsqds:
        wait_until(partial(drained, server), timeout=10)


def test_broker_restart_mid_stream_loses_nothing(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    bodies = [b"r%d" % i for i in range(600)]
    publish(nsqd, bodies)
    seen: set[bytes] = set()

    def handle(message: Message) -> None:
        gevent.sleep(0.002)
        seen.add(message.body)

    consumer = Consumer(
        TOPIC,
        CHANNEL,
        handle,
        nsqd_tcp_addresses=nsqd.tcp_address,
        max_in_flight=10,
        reconnect_interval=0.1,
        max_reconnect_interval=0.5,
    )
    consumers.append(consumer)
    consumer.start()
    wait_until(lambda: len(seen) >= 100, timeout=20)
    nsqd.restart()
    wait_until(lambda: len(seen) == len(bodies), timeout=60)
    wait_until(lambda: drained(nsqd), timeout=10)
    assert consumer.connections and consumer.connections[0].is_connected


def test_close_during_load_leaves_nothing_to_time_out(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    publish(nsqd, [b"c%d" % i for i in range(1000)])
    handled: list[bytes] = []

    def handle(message: Message) -> None:
        gevent.sleep(0.01)
        handled.append(message.body)

    before = live_greenlets()
    consumer = Consumer(
        TOPIC,
        CHANNEL,
        handle,
        nsqd_tcp_addresses=nsqd.tcp_address,
        max_in_flight=50,
        concurrency=10,
    )
    consumer.start()
    wait_until(lambda: len(handled) >= 100, timeout=20)
    consumer.close(timeout=10)
    assert consumer.join(0)
    # nsqd keeps an unanswered message in flight until its 60 s timeout, even
    # after the client left: in flight must reach 0 because everything was
    # finished or requeued, not because it timed out.
    wait_until(lambda: channel_stats(nsqd)["in_flight_count"] == 0, timeout=3)
    wait_until(lambda: channel_stats(nsqd)["client_count"] == 0, timeout=3)
    stats = channel_stats(nsqd)
    assert stats["timeout_count"] == 0
    assert stats["depth"] + len(handled) >= 1000
    assert TimerWheel.for_hub().owned_by(consumer) == []
    wait_until(lambda: live_greenlets() <= before, timeout=5, message="consumer greenlets ended")


def test_discovery_finds_a_topic_created_later(nsq_cluster: Any, consumers: list[Consumer]) -> None:
    seen: list[bytes] = []
    consumer = Consumer(
        "late_topic",
        CHANNEL,
        lambda m: seen.append(m.body),
        lookupd_http_addresses=[nsq_cluster.lookupd.http_address, "127.0.0.1:1"],
        lookupd_poll_interval=0.2,
        lookupd_poll_jitter=0.5,
    )
    consumers.append(consumer)
    consumer.start()
    assert consumer.connections == []
    publish(nsq_cluster.nsqds[1], [b"hello"], topic="late_topic")
    wait_until(lambda: seen == [b"hello"], timeout=20)
    assert [c.name for c in consumer.connections] == [nsq_cluster.nsqds[1].tcp_address]


def test_set_max_in_flight_zero_pauses(nsqd: NsqdServer, consumers: list[Consumer]) -> None:
    seen: list[bytes] = []
    consumer = Consumer(
        TOPIC,
        CHANNEL,
        lambda m: seen.append(m.body),
        nsqd_tcp_addresses=nsqd.tcp_address,
        max_in_flight=4,
    )
    consumers.append(consumer)
    consumer.start()
    publish(nsqd, [b"one"])
    wait_until(lambda: seen == [b"one"], timeout=10)
    consumer.set_max_in_flight(0)
    wait_until(lambda: [c["ready_count"] for c in channel_stats(nsqd)["clients"]] == [0])
    publish(nsqd, [b"two"])
    wait_until(lambda: channel_stats(nsqd)["depth"] == 1)
    assert seen == [b"one"]
    consumer.set_max_in_flight(4)
    wait_until(lambda: seen == [b"one", b"two"], timeout=10)


def test_starved_event_signals_a_full_batch(nsqd: NsqdServer, consumers: list[Consumer]) -> None:
    publish(nsqd, [b"b%d" % i for i in range(30)])
    batch: list[Message] = []

    def handle(message: Message) -> None:
        message.enable_async()
        batch.append(message)

    consumer = Consumer(
        TOPIC, CHANNEL, handle, nsqd_tcp_addresses=nsqd.tcp_address, max_in_flight=10
    )
    consumers.append(consumer)
    consumer.start()
    batches: list[tuple[int, bool]] = []
    while sum(size for size, _ in batches) < 30:
        starved = consumer.wait_starved(timeout=1.0)  # the tail never starves: flush on timeout
        if not batch:
            continue
        batches.append((len(batch), starved))
        for message in batch:
            message.finish()
        batch.clear()
        assert not consumer.is_starved()
        assert not consumer.starved.is_set()
    full = [size for size, starved in batches if starved]
    assert len(full) >= 2
    assert all(size >= 9 for size in full)
    wait_until(lambda: drained(nsqd), timeout=10)
