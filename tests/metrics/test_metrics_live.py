"""gnsqlite.metrics after a known run, on the embedded broker and (GNSQLITE_NSQD) the real nsqd.

One scripted run (PUB, MPUB and DPUB; a handler that fails some messages once
and one always, so it is given up; a message nsqd refuses; then nsqd going
away) must give exactly the counts it implies, with the issue's names and
labels, and the counters must keep their values when the connection is lost.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry, generate_latest

from gnsqlite import nsq
from gnsqlite.consumer import Consumer
from gnsqlite.errors import BadMessageError, NoConnectionsError
from gnsqlite.message import Message
from gnsqlite.metrics import instrument
from gnsqlite.producer import Producer
from gnsqlite.testing import NsqdServer, free_port, wait_until

TOPIC, CHANNEL = "metered", "count"
LIMIT = 100  # nsqd's --max-msg-size here


def handler(message: Message) -> None:
    if message.body == b"always-fail" or (message.body == b"fail-once" and message.attempts == 1):
        raise RuntimeError("the test's handler fails this one")


def values(registry: CollectorRegistry) -> Callable[..., float | None]:
    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    return value


def _is_one(value: Callable[..., float | None], name: str, **labels: str) -> bool:
    """For wait_until: the sample ``name`` with ``labels`` is 1."""
    return value(name, **labels) == 1


def test_a_known_run_gives_exact_counts_with_the_issues_names_and_labels(
    nsqd_factory: Callable[..., NsqdServer],
) -> None:
    nsqd = nsqd_factory(max_msg_size=LIMIT)
    address = nsqd.tcp_address
    registry = CollectorRegistry()
    producer = Producer(address, max_message_size=10 * LIMIT, timeout=0.5)
    consumer = Consumer(
        TOPIC,
        CHANNEL,
        handler,
        nsqd_tcp_addresses=[address],
        max_in_flight=10,
        max_attempts=2,
        requeue_delay=0.05,
        backoff=None,
    )
    instrument(producer, registry)
    instrument(consumer, registry)
    value = values(registry)
    producer.start()
    consumer.start()
    try:
        for _ in range(10):
            producer.publish(TOPIC, b"ok")
        producer.multi_publish(TOPIC, [b"ok", b"ok", b"ok", b"fail-once", b"fail-once"])
        producer.publish(TOPIC, b"always-fail", defer=0.1)
        with pytest.raises(BadMessageError):
            producer.publish(TOPIC, b"x" * (LIMIT + 1))  # nsqd refuses it
        # 16 messages: 13 finished at once, 2 after one requeue, 1 requeued twice and given up
        wait_until(
            lambda: consumer.stats()["totals"]["given_up"] == 1,
            timeout=15,
            message="the always-failing message given up",
        )
        wait_until(lambda: consumer.stats()["totals"]["finished"] == 16, timeout=15)
        wait_until(lambda: nsqd.channel_drained(TOPIC, CHANNEL), timeout=10)

        c = {"topic": TOPIC, "channel": CHANNEL, "nsqd": address}
        expected = {"received": 20, "finished": 16, "requeued": 4, "given_up": 1}
        for key, count in expected.items():
            assert value(f"gnsqlite_consumer_messages_{key}_total", **c) == count, key
        assert value("gnsqlite_consumer_in_flight", **c) == 0
        assert value("gnsqlite_consumer_rdy", **c) == consumer.stats()["connections"][0]["rdy"]
        assert value("gnsqlite_consumer_backoff_level", topic=TOPIC, channel=CHANNEL) == 0
        assert value("gnsqlite_consumer_starved", topic=TOPIC, channel=CHANNEL) in (0.0, 1.0)
        # every delivery but the one given up ran the handler
        handled = value("gnsqlite_consumer_handler_seconds_count", topic=TOPIC, channel=CHANNEL)
        assert handled == 19
        inf = value(
            "gnsqlite_consumer_handler_seconds_bucket", topic=TOPIC, channel=CHANNEL, le="+Inf"
        )
        assert inf == 19

        published = {"pub": (10, 10), "mpub": (1, 5), "dpub": (1, 1)}
        for command, (commands, messages) in published.items():
            labels = {"topic": TOPIC, "command": command}
            assert value("gnsqlite_producer_publishes_total", **labels) == commands, command
            assert value("gnsqlite_producer_messages_total", **labels) == messages, command
        # the refused PUB was timed too: 11 PUBs
        assert value("gnsqlite_producer_publish_seconds_count", topic=TOPIC, command="pub") == 11
        assert value("gnsqlite_producer_publish_errors_total", code="E_BAD_MESSAGE") == 1
        assert value("gnsqlite_producer_in_flight") == 0
        assert producer.stats()["totals"] == {
            "publishes": 12,
            "messages": 16,
            "errors": 1,
            "in_flight": 0,
        }
        for role in ("consumer", "producer"):
            connected = partial(
                _is_one, value, "gnsqlite_connections", role=role, nsqd=address, state="connected"
            )
            wait_until(connected, timeout=10, message=f"{role} connected")
        assert consumer.health().ok and producer.health().ok

        nsqd.stop()
        wait_until(
            lambda: not consumer.health().ok and not producer.health().ok,
            timeout=15,
            message="both see nsqd gone",
        )
        with pytest.raises(NoConnectionsError):
            producer.publish(TOPIC, b"nowhere")
        assert value("gnsqlite_producer_publish_errors_total", code="no_connections") == 1
        for role in ("consumer", "producer"):
            assert value("gnsqlite_connections", role=role, nsqd=address, state="connected") == 0
            assert value("gnsqlite_connections", role=role, nsqd=address, state="disconnected") == 1
        # counters survive the lost connection: Prometheus counters never go down
        for key, count in expected.items():
            assert value(f"gnsqlite_consumer_messages_{key}_total", **c) == count, key
        assert value("gnsqlite_consumer_in_flight", **c) is None  # no connection, no series
        assert "reasons" in consumer.health().as_dict()
        assert consumer.health().reasons[0].startswith("no nsqd connected")
        text = generate_latest(registry).decode()
        assert (
            f'gnsqlite_consumer_messages_received_total{{channel="{CHANNEL}",nsqd="{address}"'
            in text
        )
    finally:
        consumer.close(timeout=5)
        producer.close()


def test_health_ages_follow_messages_and_heartbeats(nsqd: NsqdServer) -> None:
    consumer = Consumer(
        TOPIC,
        CHANNEL,
        lambda m: None,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        heartbeat_interval=1.0,
    )
    with Producer(nsqd.tcp_address) as producer:
        consumer.start()
        try:
            wait_until(lambda: consumer.health().ok, timeout=10)
            (conn,) = consumer.health().connections
            assert conn.address == nsqd.tcp_address and conn.last_message_age is None
            producer.publish(TOPIC, b"one")
            wait_until(
                lambda: consumer.health().connections[0].last_message_age is not None, timeout=10
            )
            first = consumer.health().connections[0]
            assert first.last_message_age is not None and first.last_message_age < 5
            # with no messages, heartbeats keep the frame age below ~1 interval
            wait_until(
                lambda: (consumer.health().connections[0].last_message_age or 0) > 1.5, timeout=10
            )
            now = consumer.health().connections[0]
            assert now.last_frame_age is not None and now.last_frame_age < 1.5
            assert now.last_message_age is not None and now.last_message_age > 1.5
            assert consumer.health().backoff == "normal"
        finally:
            consumer.close(timeout=5)


def test_the_pynsq_writer_and_reader_are_counted(nsqd: NsqdServer) -> None:
    registry = CollectorRegistry()
    value = values(registry)
    answers: list[Any] = []
    writer = nsq.Writer([nsqd.tcp_address])
    reader = nsq.Reader(
        TOPIC, CHANNEL, lambda m: True, nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=5
    )
    instrument(writer, registry)
    instrument(reader, registry, timing=False)  # counters only: no per-message clock reads
    writer.pub(TOPIC, b"early", lambda conn, data: answers.append(data))  # no connection yet
    writer.start()
    reader.start()
    try:
        wait_until(lambda: bool(writer.conns), timeout=10)
        writer.pub(TOPIC, b"one", lambda conn, data: answers.append(data))
        writer.mpub(TOPIC, [b"two", b"three"], lambda conn, data: answers.append(data))
        writer.dpub(TOPIC, 50, b"four", lambda conn, data: answers.append(data))
        wait_until(lambda: len(answers) == 4, timeout=10)
        assert answers[1:] == [b"OK"] * 3
        for command, count in (("pub", 1), ("mpub", 2), ("dpub", 1)):
            labels = {"topic": TOPIC, "command": command}
            assert value("gnsqlite_producer_publishes_total", **labels) == 1
            assert value("gnsqlite_producer_messages_total", **labels) == count
            assert value("gnsqlite_producer_publish_seconds_count", **labels) == 1
        assert value("gnsqlite_producer_publish_errors_total", code="no_connections") == 1
        received = {"topic": TOPIC, "channel": CHANNEL, "nsqd": nsqd.tcp_address}
        wait_until(
            lambda: value("gnsqlite_consumer_messages_finished_total", **received) == 4, timeout=10
        )
        assert value("gnsqlite_consumer_messages_received_total", **received) == 4
        assert (
            value("gnsqlite_consumer_handler_seconds_count", topic=TOPIC, channel=CHANNEL) is None
        )
    finally:
        reader.close()
        writer.close()


def test_batch_calls_are_timed_and_dead_lettered_messages_count_as_given_up(
    nsqd: NsqdServer,
) -> None:
    registry = CollectorRegistry()
    value = values(registry)
    calls: list[int] = []

    def store(messages: list[Message]) -> None:
        calls.append(len(messages))

    batches = Consumer(
        "batched",
        CHANNEL,
        batch_handler=store,
        batch_size=5,
        batch_timeout=0.2,
        max_in_flight=10,
        nsqd_tcp_addresses=[nsqd.tcp_address],
    )

    def fail(message: Message) -> None:
        raise RuntimeError("the test's handler fails every message")

    def hook_fails(message: Message) -> None:
        raise RuntimeError("the test's on_giving_up fails too")

    doomed = Consumer(
        "doomed",
        CHANNEL,
        fail,
        max_attempts=1,
        requeue_delay=0.05,
        backoff=None,
        dead_letter_topic="doomed_dead",
        on_giving_up=hook_fails,
        nsqd_tcp_addresses=[nsqd.tcp_address],
    )
    instrument(batches, registry)
    instrument(doomed, registry)
    with Producer(nsqd.tcp_address) as producer:
        batches.start()
        doomed.start()
        try:
            producer.multi_publish("batched", [b"%d" % i for i in range(10)])
            producer.publish("doomed", b"x")
            wait_until(lambda: sum(calls) == 10, timeout=10, message="10 messages in batches")
            batched = {"topic": "batched", "channel": CHANNEL}
            # one observation per batch handler call, not per message
            assert value("gnsqlite_consumer_handler_seconds_count", **batched) == len(calls)
            wait_until(
                lambda: (
                    value(
                        "gnsqlite_consumer_messages_finished_total",
                        nsqd=nsqd.tcp_address,
                        **batched,
                    )
                    == 10
                ),
                timeout=10,
            )
            # dead-lettered (the hook failing afterwards does not undo it): given up, finished
            doomed_labels = {"topic": "doomed", "channel": CHANNEL, "nsqd": nsqd.tcp_address}
            wait_until(
                lambda: value("gnsqlite_consumer_messages_given_up_total", **doomed_labels) == 1,
                timeout=10,
            )
            assert value("gnsqlite_consumer_messages_finished_total", **doomed_labels) == 1
            assert value("gnsqlite_consumer_messages_requeued_total", **doomed_labels) == 1
            wait_until(
                lambda: nsqd.topic_stats("doomed_dead").get("message_count") == 1, timeout=10
            )
            dead = {"topic": "doomed", "channel": CHANNEL, "dead_letter_topic": "doomed_dead"}
            assert value("gnsqlite_consumer_dead_letters_total", outcome="published", **dead) == 1
            assert value("gnsqlite_consumer_dead_letters_total", outcome="failed", **dead) == 0
        finally:
            batches.close(timeout=5)
            doomed.close(timeout=5)


def test_a_dead_letter_publish_that_fails_is_counted_and_the_message_requeued(
    nsqd: NsqdServer,
) -> None:
    # The dead-letter nsqd is a port nobody listens on: each give-up fails to
    # publish, so the message is requeued (never finished, never lost).
    registry = CollectorRegistry()
    value = values(registry)

    def fail(message: Message) -> None:
        raise RuntimeError("the test's handler fails every message")

    stranded = Consumer(
        "stranded",
        CHANNEL,
        fail,
        max_attempts=1,
        requeue_delay=0.05,
        backoff=None,
        dead_letter_topic="stranded_dead",
        dead_letter_nsqd=f"127.0.0.1:{free_port()}",
        dead_letter_timeout=0.3,
        nsqd_tcp_addresses=[nsqd.tcp_address],
    )
    instrument(stranded, registry)
    dead = {"topic": "stranded", "channel": CHANNEL, "dead_letter_topic": "stranded_dead"}
    with Producer(nsqd.tcp_address) as producer:
        stranded.start()
        try:
            producer.publish("stranded", b"x")
            wait_until(
                lambda: (
                    (value("gnsqlite_consumer_dead_letters_total", outcome="failed", **dead) or 0)
                    >= 1
                ),
                timeout=15,
            )
            assert value("gnsqlite_consumer_dead_letters_total", outcome="published", **dead) == 0
            labels = {"topic": "stranded", "channel": CHANNEL, "nsqd": nsqd.tcp_address}
            assert value("gnsqlite_consumer_messages_given_up_total", **labels) == 0
            assert value("gnsqlite_consumer_messages_finished_total", **labels) == 0
        finally:
            stranded.close(timeout=5)
