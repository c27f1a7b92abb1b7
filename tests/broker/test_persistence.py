"""With ``data_path``, a broker stopped and started again keeps its messages."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gevent
import pytest
from nsqd_raw import RawClient

from gnsqlite.broker import Broker

pytestmark = pytest.mark.embedded_only


def test_queued_in_flight_and_deferred_messages_survive_a_restart(
    make_broker: Callable[..., Broker], tmp_path: Path
) -> None:
    first = make_broker(data_path=str(tmp_path))
    assert first.tcp_address is not None
    with RawClient(first.tcp_address) as c, RawClient(first.tcp_address) as p:
        p.pub("held", b"no channel yet")
        c.sub("t", "ch", rdy=1)
        p.mpub("t", [b"in flight", b"queued"])
        p.command(b"DPUB t 60000", b"deferred")
        assert p.response() == b"OK"
        in_flight = c.message()
        assert in_flight.body == b"in flight"
    first.stop()

    second = make_broker(data_path=str(tmp_path))
    assert "held" in second.topics and "ch" in second.topics["t"].channels
    assert second.tcp_address is not None
    with RawClient(second.tcp_address) as c:
        c.sub("t", "ch", rdy=10)
        got = {m.body: m for m in c.messages(3)}
        assert set(got) == {b"in flight", b"queued", b"deferred"}
        assert got[b"in flight"].id == in_flight.id
        assert got[b"in flight"].timestamp == in_flight.timestamp
        assert got[b"in flight"].attempts == 2  # one before the restart, one now
        assert got[b"queued"].attempts == 1
        for m in got.values():
            c.fin(m.id)
    with RawClient(second.tcp_address) as c:
        c.sub("held", "ch", rdy=1)
        assert c.message().body == b"no channel yet"


def test_new_ids_do_not_reuse_persisted_ones(
    make_broker: Callable[..., Broker], tmp_path: Path
) -> None:
    first = make_broker(data_path=str(tmp_path))
    first.publish("t", [b"a", b"b"])
    old = {m.id for m in first.topics["t"].held}
    first.stop()
    second = make_broker(data_path=str(tmp_path))
    second.publish("t", [b"c"])
    ids = [m.id for m in second.topics["t"].held]
    assert set(ids[:2]) == old
    assert ids[2] not in old


def test_paused_state_and_ephemeral_names(
    make_broker: Callable[..., Broker], tmp_path: Path
) -> None:
    first = make_broker(data_path=str(tmp_path))
    topic = first.get_topic("t")
    first.pause_topic(topic, True)
    first.create_channel(topic, "c")
    first.get_topic("gone#ephemeral")
    first.stop()
    second = make_broker(data_path=str(tmp_path))
    assert second.topics["t"].paused is True
    assert "gone#ephemeral" not in second.topics


def test_without_data_path_nothing_is_kept(make_broker: Callable[..., Broker]) -> None:
    first = make_broker()
    first.publish("t", [b"a"])
    port = first.tcp_port
    first.stop()
    gevent.sleep(0)
    second = make_broker(tcp_address=f"127.0.0.1:{port}")
    assert second.topics == {}
