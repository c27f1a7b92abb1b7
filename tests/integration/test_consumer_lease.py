"""Lease extension and message age against a live nsqd (embedded, or real with GNSQLITE_NSQD).

nsqd runs with ``--msg-timeout=1.5s`` (short, with room for a loaded
machine's late timers: a touch is due with half of it left): a handler
three times slower than that
finishes each message exactly once because the consumer TOUCHes it; past
the bound (nsqd's ``--max-msg-timeout``, or the consumer's ``max_lease``)
the touching stops and nsqd times the message out and redelivers it.
``max_age`` keeps deferred and backlogged messages older than it from the
handler. The broker is observed through its HTTP API only.
"""

from __future__ import annotations

import time
from typing import Any

import gevent
import pytest
from prometheus_client import CollectorRegistry

from gnsqlite.consumer import Consumer
from gnsqlite.deadletter import decode_envelope
from gnsqlite.message import Message
from gnsqlite.metrics import instrument
from gnsqlite.testing import NsqdServer, wait_until

TOPIC = "lease_test"
CHANNEL = "ch"
DEAD = "lease_test.dead"
MSG_TIMEOUT = 1.5  # nsqd's --msg-timeout, seconds


def consumer_of(
    server: NsqdServer, handler: Any, consumers: list[Consumer], **options: Any
) -> Consumer:
    consumer = Consumer(TOPIC, CHANNEL, handler, nsqd_tcp_addresses=server.tcp_address, **options)
    consumers.append(consumer)
    consumer.start()
    assert consumer.connected.wait(10)
    return consumer


def drained(server: NsqdServer) -> bool:
    return server.channel_drained(TOPIC, CHANNEL)


def nsqd_scans_the_channel(server: NsqdServer) -> None:
    """Create TOPIC/CHANNEL and wait until nsqd's queue scan looks at it.

    nsqd's queue scan loop (in-flight timeouts, and deferred messages
    coming due) looks at the channels it listed at its last refresh (every
    5 s), so for a few seconds a new channel's messages are never timed
    out, touched or not, and its deferred ones wait. A deferred probe on a
    channel created after this one, once delivered, proves a refresh listed
    both. Blocks up to 15 s.
    """
    http = server.http
    http.create_topic(TOPIC)
    http.create_channel(TOPIC, CHANNEL)
    http.create_topic("lease_probe")
    http.create_channel("lease_probe", "probe")
    http.pub("lease_probe", b"probe", defer=0.1)
    wait_until(
        lambda: server.channel_stats("lease_probe", "probe").get("depth") == 1,
        timeout=15,
        message="nsqd's scan delivered the deferred probe",
    )


def test_a_handler_three_times_slower_than_msg_timeout_finishes_each_message_once(
    nsqd_factory: Any, consumers: list[Consumer]
) -> None:
    server = nsqd_factory(msg_timeout=MSG_TIMEOUT)
    nsqd_scans_the_channel(server)
    handled: list[tuple[bytes, int]] = []

    def handle(message: Message) -> None:
        gevent.sleep(3 * MSG_TIMEOUT)  # the work: three msg_timeouts
        handled.append((message.body, message.attempts))

    consumer = consumer_of(server, handle, consumers, max_in_flight=3)
    registry = CollectorRegistry()
    instrument(consumer, registry)
    assert consumer.connections[0].msg_timeout == MSG_TIMEOUT  # nsqd's, from IDENTIFY
    bodies = [b"a", b"b", b"c"]
    server.http.mpub(TOPIC, bodies)
    wait_until(lambda: len(handled) == 3 and drained(server), timeout=20)
    # Finished on the first delivery: nsqd timed nothing out, so no second
    # delivery can come (an in-flight message is only redelivered on a timeout).
    assert sorted(handled) == [(b, 1) for b in bodies]
    channel = server.channel_stats(TOPIC, CHANNEL)
    assert (channel["timeout_count"], channel["requeue_count"]) == (0, 0)
    assert channel["message_count"] == 3
    stats = consumer.stats()
    assert stats["totals"]["finished"] == 3
    # A touch every half msg_timeout while the handler runs (five), per message.
    touches = stats["totals"]["touches"]
    assert touches >= 3 * 4, stats["totals"]
    labels = {"topic": TOPIC, "channel": CHANNEL, "nsqd": server.tcp_address}
    assert registry.get_sample_value("gnsqlite_consumer_touches_total", labels) == touches
    assert stats["leases"] == {
        "max_lease": float("inf"),
        "held": 0,
        "touches": stats["totals"]["touches"],
    }


@pytest.mark.parametrize("bound_by", ["nsqd", "max_lease"])
def test_a_handler_past_the_bound_loses_its_message_to_a_redelivery_at_the_bound(
    nsqd_factory: Any, consumers: list[Consumer], bound_by: str
) -> None:
    # The bound is two msg_timeouts after delivery: nsqd's --max-msg-timeout
    # (which caps a TOUCH), or the consumer's max_lease. Without the touches
    # nsqd would redeliver after one msg_timeout.
    bound = 2 * MSG_TIMEOUT
    flags = {"max_msg_timeout": bound} if bound_by == "nsqd" else {}
    server = nsqd_factory(msg_timeout=MSG_TIMEOUT, **flags)
    nsqd_scans_the_channel(server)
    options = {"max_lease": bound} if bound_by == "max_lease" else {}
    arrived: list[tuple[int, float]] = []
    handled: list[int] = []

    def handle(message: Message) -> None:
        if message.attempts == 1:
            gevent.sleep(bound + 1.5 * MSG_TIMEOUT)  # past the bound
        handled.append(message.attempts)

    # A second worker takes the redelivery while the first still runs.
    consumer = consumer_of(server, handle, consumers, max_in_flight=1, concurrency=2, **options)
    consumer.on_server_error = lambda conn, error: None  # type: ignore[method-assign]  # the late FIN is refused: expected
    consumer.add_message_observer(lambda m: arrived.append((m.attempts, time.monotonic())))
    server.http.pub(TOPIC, b"slow")
    wait_until(lambda: len(handled) == 2 and drained(server), timeout=20)
    assert [attempts for attempts, _ in arrived] == [1, 2]
    held_for = arrived[1][1] - arrived[0][1]
    # Touched up to the bound, not further: redelivered at the bound (within a scan).
    assert bound - 0.2 <= held_for < bound + MSG_TIMEOUT, held_for
    assert handled == [2, 1]  # the redelivery was finished first; the late FIN was refused
    channel = server.channel_stats(TOPIC, CHANNEL)
    assert channel["timeout_count"] == 1
    assert 1 <= consumer.stats()["totals"]["touches"] <= 3


def test_a_deferred_message_older_than_max_age_does_not_reach_the_handler(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    nsqd_scans_the_channel(nsqd)  # deferred messages come due on time
    handled: list[bytes] = []
    consumer = consumer_of(nsqd, lambda m: handled.append(m.body), consumers, max_age=2.0)
    http = nsqd.http
    http.pub(TOPIC, b"late", defer=3.0)  # nsqd's timestamp is the publish: 3 s old on arrival
    http.pub(TOPIC, b"soon", defer=0.2)
    http.pub(TOPIC, b"now")
    wait_until(
        lambda: consumer.stats()["totals"]["expired"] == 1 and drained(nsqd),
        timeout=15,
        message="the late message expired and the channel drained",
    )
    assert sorted(handled) == [b"now", b"soon"]
    stats = consumer.stats()
    assert stats["totals"]["finished"] == 3  # the expired one is finished too
    assert stats["by_nsqd"][nsqd.tcp_address]["expired"] == 1
    channel = nsqd.channel_stats(TOPIC, CHANNEL)
    assert (channel["requeue_count"], channel["timeout_count"]) == (0, 0)


def test_a_backlog_older_than_max_age_goes_to_the_dead_letter_topic(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    http = nsqd.http
    old = [b"old-1", b"old-2", b"old-3"]
    http.mpub(TOPIC, old)
    published = time.time()
    wait_until(lambda: time.time() > published + 2.5, timeout=5)  # the backlog ages
    fresh = [b"new-1", b"new-2"]
    http.mpub(TOPIC, fresh)
    handled: list[bytes] = []
    consumer = consumer_of(
        nsqd,
        lambda m: handled.append(m.body),
        consumers,
        max_in_flight=5,
        max_age=2.0,
        dead_letter_topic=DEAD,
        dead_letter_envelope=True,
    )
    wait_until(
        lambda: consumer.stats()["totals"]["expired"] == 3 and drained(nsqd),
        timeout=15,
        message="the backlog expired and the channel drained",
    )
    assert sorted(handled) == fresh
    assert consumer.stats()["dead_letters"]["published"] == 3
    registry = CollectorRegistry()
    instrument(consumer, registry)
    labels = {"topic": TOPIC, "channel": CHANNEL, "nsqd": nsqd.tcp_address}
    assert registry.get_sample_value("gnsqlite_consumer_messages_expired_total", labels) == 3
    letters: list[Message] = []
    reader = Consumer(
        DEAD, "check", letters.append, nsqd_tcp_addresses=nsqd.tcp_address, max_in_flight=5
    )
    consumers.append(reader)
    reader.start()
    wait_until(lambda: len(letters) == 3, timeout=10)
    envelopes = sorted((decode_envelope(m.body) for m in letters), key=lambda e: e.body)
    assert [e.body for e in envelopes] == old
    for envelope in envelopes:
        assert envelope.error is not None and envelope.error.type == "MessageExpired"
        assert envelope.attempts == 1 and envelope.topic == TOPIC
