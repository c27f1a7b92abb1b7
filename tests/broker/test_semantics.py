"""What the embedded broker does with messages: fan-out, holding, RDY, timeouts,
REQ, DPUB, TOUCH, ephemeral names, heartbeats, sampling, pausing."""

from __future__ import annotations

import time
from collections.abc import Callable

import gevent
import pytest
from nsqd_raw import RawClient

from gnsqlite.broker import Broker
from gnsqlite.testing import wait_until

pytestmark = pytest.mark.embedded_only


def raw(broker: Broker) -> RawClient:
    assert broker.tcp_address is not None
    return RawClient(broker.tcp_address)


def test_every_channel_gets_every_message(broker: Broker) -> None:
    with raw(broker) as a, raw(broker) as b, raw(broker) as p:
        a.sub("t", "one", rdy=10)
        b.sub("t", "two", rdy=10)
        p.mpub("t", [b"1", b"2", b"3"])
        assert [m.body for m in a.messages(3)] == [b"1", b"2", b"3"]
        assert [m.body for m in b.messages(3)] == [b"1", b"2", b"3"]


def drain(client: RawClient, quiet: float = 0.3) -> list[bytes]:
    """Every message body that arrives until ``quiet`` seconds pass without one."""
    bodies: list[bytes] = []
    try:
        while True:
            bodies.append(client.message(timeout=quiet).body)
    except gevent.Timeout:
        return bodies


def test_channel_subscribers_share_its_messages(broker: Broker) -> None:
    with raw(broker) as a, raw(broker) as b, raw(broker) as p:
        a.sub("t", "ch", rdy=10)
        b.sub("t", "ch", rdy=10)
        wait_until(lambda: sum(c.ready_count for c in broker.clients) == 20)
        p.mpub("t", [b"%d" % i for i in range(10)])
        got_a = drain(a)
        got_b = drain(b)
        assert sorted(got_a + got_b) == sorted(b"%d" % i for i in range(10))
        assert got_a and got_b


def test_topic_without_channel_holds_messages_until_the_first_one(broker: Broker) -> None:
    with raw(broker) as p:
        p.mpub("t", [b"early1", b"early2"])
    with raw(broker) as c:
        c.sub("t", "ch", rdy=5)
        assert [m.body for m in c.messages(2)] == [b"early1", b"early2"]


def test_rdy_bounds_messages_in_flight(broker: Broker) -> None:
    with raw(broker) as c, raw(broker) as p:
        c.sub("t", "ch", rdy=2)
        p.mpub("t", [b"a", b"b", b"c", b"d"])
        first = c.messages(2)
        c.assert_silent(0.2)
        c.fin(first[0].id)
        assert c.message().body == b"c"
        c.assert_silent(0.2)
        c.rdy(0)
        c.fin(first[1].id)
        c.assert_silent(0.2)
        c.rdy(1)
        assert c.message().body == b"d"


def test_timeout_requeues_with_attempts_counted(broker: Broker) -> None:
    with raw(broker) as c, raw(broker) as p:
        c.sub("t", "ch", rdy=1)
        p.pub("t", b"slow")
        first = c.message()
        assert first.attempts == 1
        started = time.monotonic()
        again = c.message(timeout=3)
        assert time.monotonic() - started >= 0.9  # msg_timeout is 1 s
        assert (again.id, again.body, again.attempts) == (first.id, b"slow", 2)
        assert broker.topics["t"].channels["ch"].timeout_count == 1


def test_identify_msg_timeout_is_used(broker: Broker) -> None:
    with raw(broker) as c, raw(broker) as p:
        c.negotiate(msg_timeout=3000)
        c.sub("t", "ch", rdy=1)
        p.pub("t", b"x")
        c.message()
        c.assert_silent(1.5)  # the broker default (1 s) would have timed out


def test_req_with_delay_defers(broker: Broker) -> None:
    with raw(broker) as c, raw(broker) as p:
        c.sub("t", "ch", rdy=1)
        p.pub("t", b"again")
        m = c.message()
        started = time.monotonic()
        c.req(m.id, 300)
        back = c.message()
        assert time.monotonic() - started >= 0.28
        assert (back.id, back.attempts) == (m.id, 2)
        channel = broker.topics["t"].channels["ch"]
        assert channel.requeue_count == 1


def test_req_zero_requeues_at_once(broker: Broker) -> None:
    with raw(broker) as c, raw(broker) as p:
        c.sub("t", "ch", rdy=1)
        p.pub("t", b"again")
        m = c.message()
        c.req(m.id, 0)
        assert c.message(timeout=0.5).attempts == 2


def test_req_delay_above_max_is_clamped_not_refused(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(max_req_timeout=0.3, queue_scan_interval=0.02)
    with raw(broker) as c, raw(broker) as p:
        c.sub("t", "ch", rdy=1)
        p.pub("t", b"x")
        m = c.message()
        c.req(m.id, 60_000)
        assert c.message(timeout=2).id == m.id


def test_dpub_defers(broker: Broker) -> None:
    with raw(broker) as c, raw(broker) as p:
        c.sub("t", "ch", rdy=5)
        started = time.monotonic()
        p.command(b"DPUB t 300", b"later")
        assert p.response() == b"OK"
        p.pub("t", b"now")
        assert c.message().body == b"now"
        assert c.message().body == b"later"
        assert time.monotonic() - started >= 0.28


def test_touch_resets_the_timeout(broker: Broker) -> None:
    with raw(broker) as c, raw(broker) as p:
        c.sub("t", "ch", rdy=1)
        p.pub("t", b"x")
        m = c.message()
        for _ in range(4):
            gevent.sleep(0.5)
            c.touch(m.id)
        # 2 s after delivery, twice the msg_timeout: still in flight thanks to TOUCH
        c.fin(m.id)
        c.assert_silent(0.3)
        assert broker.topics["t"].channels["ch"].timeout_count == 0


def test_touch_is_capped_by_max_msg_timeout(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(msg_timeout=1.0, max_msg_timeout=1.2, queue_scan_interval=0.02)
    with raw(broker) as c, raw(broker) as p:
        c.sub("t", "ch", rdy=1)
        p.pub("t", b"x")
        m = c.message()
        started = time.monotonic()
        gevent.sleep(0.9)
        c.touch(m.id)  # uncapped, this would time out 1.9 s after delivery
        again = c.message(timeout=3)
        assert again.attempts == 2
        assert 1.1 <= time.monotonic() - started < 1.7


def test_ephemeral_channel_and_topic_vanish_with_their_last_client(broker: Broker) -> None:
    events: list[tuple[str, str, str | None]] = []
    broker.add_listener(lambda *e: events.append(e))
    c = raw(broker)
    c.sub("t#ephemeral", "ch#ephemeral")
    assert ("REGISTER", "t#ephemeral", None) in events
    assert ("REGISTER", "t#ephemeral", "ch#ephemeral") in events
    c.close()
    wait_until(lambda: "t#ephemeral" not in broker.topics)
    assert events[-2:] == [
        ("UNREGISTER", "t#ephemeral", "ch#ephemeral"),
        ("UNREGISTER", "t#ephemeral", None),
    ]


def test_ephemeral_channel_on_normal_topic(broker: Broker) -> None:
    with raw(broker) as keep:
        keep.sub("t", "durable")
        c = raw(broker)
        c.sub("t", "tmp#ephemeral")
        c.close()
        wait_until(lambda: "tmp#ephemeral" not in broker.topics["t"].channels)
        assert "durable" in broker.topics["t"].channels


def test_heartbeats_are_sent_and_silent_clients_dropped(broker: Broker) -> None:
    with raw(broker) as c:
        c.identify(heartbeat_interval=1000)
        started = time.monotonic()
        assert c.frame(timeout=2) == (0, b"_heartbeat_")
        assert 0.9 <= time.monotonic() - started < 1.9
        # never answering: closed after two intervals without data
        c.assert_closed(timeout=4)
        assert time.monotonic() - started >= 1.9


def test_answering_heartbeats_keeps_the_connection(broker: Broker) -> None:
    with raw(broker) as c:
        c.identify(heartbeat_interval=1000)
        for _ in range(3):
            assert c.frame(timeout=2) == (0, b"_heartbeat_")
            c.command(b"NOP")
        c.pub("t", b"alive")


def test_sample_rate_delivers_a_share(broker: Broker) -> None:
    with raw(broker) as c, raw(broker) as p:
        c.negotiate(sample_rate=30)
        c.sub("t", "ch", rdy=1000)
        p.mpub("t", [b"x"] * 1000)
        got = len(drain(c))
        assert 150 < got < 450, got


def test_paused_channel_delivers_nothing_until_unpaused(broker: Broker) -> None:
    with raw(broker) as c, raw(broker) as p:
        c.sub("t", "ch", rdy=5)
        channel = broker.topics["t"].channels["ch"]
        broker.pause_channel(channel, True)
        p.pub("t", b"x")
        c.assert_silent(0.2)
        broker.pause_channel(channel, False)
        assert c.message().body == b"x"


def test_message_ids_are_16_hex_bytes_and_unique(broker: Broker) -> None:
    with raw(broker) as c, raw(broker) as p:
        c.sub("t", "ch", rdy=100)
        p.mpub("t", [b"x"] * 100)
        ids = [m.id for m in c.messages(100)]
        assert len(set(ids)) == 100
        assert all(len(i) == 16 and int(i, 16) >= 0 for i in ids)


def test_in_flight_of_a_gone_client_times_out_to_another(broker: Broker) -> None:
    with raw(broker) as b, raw(broker) as p:
        a = raw(broker)
        a.sub("t", "ch", rdy=1)
        p.pub("t", b"orphan")
        first = a.message()
        a.close()
        b.sub("t", "ch", rdy=1)
        again = b.message(timeout=3)
        assert (again.id, again.attempts) == (first.id, 2)
