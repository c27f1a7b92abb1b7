"""The drop-in's Reader, Writer and run() against a live nsqd, in this process."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import gevent
import gevent.event
import pytest
from nsq_support import channel_stats, drained, topic_stats

from gnsqlite import nsq
from gnsqlite.http import NsqdHTTPClient
from gnsqlite.nsq import reader as reader_module
from gnsqlite.nsq import runner
from gnsqlite.testing import FaultProxy, NsqdServer, wait_until

TOPIC = "dropin"
CHANNEL = "ch"
pytestmark = pytest.mark.usefixtures("closes_dropin_clients")


def publish(server: NsqdServer, bodies: list[bytes], topic: str = TOPIC) -> None:
    NsqdHTTPClient(server.http_address).mpub(topic, bodies)


def make_reader(
    server: NsqdServer,
    handler: Any = None,
    cls: Any = nsq.Reader,
    channel: str = CHANNEL,
    **kw: Any,
) -> Any:
    kw.setdefault("max_in_flight", 10)
    kw.setdefault("requeue_delay", 0)
    kw.setdefault("max_backoff_duration", 0.2)
    return cls(TOPIC, channel, handler, nsqd_tcp_addresses=[server.tcp_address], **kw)


def test_handler_answers_mean_what_they_mean_in_pynsq(
    nsqd: NsqdServer, caplog: pytest.LogCaptureFixture
) -> None:
    publish(nsqd, [b"true", b"false", b"raise", b"none", b"async"])
    attempts: dict[bytes, list[int]] = {}

    def handler(message: nsq.Message) -> Any:
        assert isinstance(message, nsq.Message) and isinstance(message.id, bytes)
        attempts.setdefault(message.body, []).append(message.attempts)
        first = message.attempts == 1
        if message.body == b"false" and first:
            return False
        if message.body == b"raise" and first:
            raise RuntimeError("fails once")
        if message.body == b"none" and first:
            return None
        if message.body == b"async":
            message.enable_async()
            assert message.is_async() and not message.has_responded()
            gevent.spawn_later(0.05, message.finish)
            return None
        return True

    caplog.set_level(logging.WARNING)
    reader = make_reader(nsqd, handler)
    reader.start()
    wait_until(
        lambda: (
            len(attempts) == 5 and all(attempts[b] == [1, 2] for b in (b"false", b"raise", b"none"))
        ),
        timeout=20,
    )
    wait_until(lambda: drained(nsqd, TOPIC, CHANNEL), timeout=10)
    assert attempts[b"true"] == [1] and attempts[b"async"] == [1]
    stats = channel_stats(nsqd, TOPIC, CHANNEL)
    assert stats["requeue_count"] == 3 and stats["message_count"] == 5
    assert "returned None" in caplog.text and "enable_async" in caplog.text
    reader.close()


class Hooked(nsq.Reader):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.given_up: list[tuple[bytes, int]] = []
        self.processed: list[bytes] = []
        self.paused = False

    def preprocess_message(self, message: nsq.Message) -> Any:
        return message.body.decode()

    def validate_message(self, message: Any) -> bool:
        return bool(message != "invalid")

    def process_message(self, message: nsq.Message) -> bool:
        self.processed.append(message.body)
        return message.body != b"poison"

    def giving_up(self, message: nsq.Message) -> None:
        self.given_up.append((message.body, message.attempts))

    def disabled(self) -> bool:  # type: ignore[override]
        return self.paused


def test_subclass_hooks(nsqd: NsqdServer) -> None:
    publish(nsqd, [b"ok", b"invalid", b"poison"])
    reader = make_reader(nsqd, cls=Hooked, max_tries=2)
    reader.start()
    wait_until(lambda: reader.given_up == [(b"poison", 3)], timeout=20)
    wait_until(lambda: drained(nsqd, TOPIC, CHANNEL), timeout=10)
    assert sorted(reader.processed) == [b"ok", b"poison", b"poison"]
    reader.close()


def test_dead_letter_options_reach_the_consumer(nsqd: NsqdServer) -> None:
    publish(nsqd, [b"ok", b"poison"])
    reader = make_reader(
        nsqd, cls=Hooked, max_tries=1, dead_letter_topic="dropin.dead", dead_letter_envelope=True
    )
    reader.start()
    wait_until(lambda: reader.given_up == [(b"poison", 2)], timeout=20)
    wait_until(lambda: drained(nsqd, TOPIC, CHANNEL), timeout=10)
    # giving_up ran after the publish: the dead letter is in its topic
    assert reader.consumer.stats()["dead_letters"]["published"] == 1
    assert topic_stats(nsqd, "dropin.dead")["message_count"] == 1
    reader.close()
    with pytest.raises(TypeError, match="'dead_letter_topik'; did you mean 'dead_letter_topic'"):
        make_reader(nsqd, dead_letter_topik="x")


def test_lease_and_age_options_reach_the_consumer(nsqd: NsqdServer) -> None:
    reader = make_reader(nsqd, lambda m: True, max_lease=120.0, max_age=30.0)
    config = reader.consumer.config
    assert (config.max_lease, config.max_age) == (120.0, 30.0)
    assert "max_lease" not in reader.conn_kwargs  # not a connection keyword
    off = make_reader(nsqd, lambda m: True, max_lease=0)
    assert off.consumer.stats()["leases"]["max_lease"] is None
    with pytest.raises((TypeError, ValueError), match=r"max_age=-1 is out of range"):
        make_reader(nsqd, lambda m: True, max_age=-1)


def test_disabled_pauses_the_reader(nsqd: NsqdServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader_module, "DISABLED_CHECK_INTERVAL", 0.05)
    reader = make_reader(nsqd, cls=Hooked)
    reader.paused = True
    reader.start()
    publish(nsqd, [b"a", b"b"])
    wait_until(lambda: len(reader.conns) == 1, timeout=10)
    gevent.sleep(0.3)  # a paused reader must stay idle: nothing may arrive in this window
    assert reader.processed == [] and reader.total_rdy == 0
    reader.paused = False
    wait_until(lambda: sorted(reader.processed) == [b"a", b"b"], timeout=10)
    reader.close()


def test_max_in_flight_starvation_and_conns(nsqd: NsqdServer) -> None:
    held: list[nsq.Message] = []

    def hold(message: nsq.Message) -> None:
        message.enable_async()
        held.append(message)

    publish(nsqd, [b"m%d" % i for i in range(20)])
    reader = make_reader(nsqd, hold, max_in_flight=5)
    reader.start()
    wait_until(lambda: len(held) == 5 and reader.is_starved(), timeout=10)
    (view,) = reader.conns.values()
    assert view.id == nsqd.tcp_address and view.in_flight == 5 and view.connected()
    reader.set_max_in_flight(0)
    assert reader.max_in_flight == 0
    for message in held:
        message.finish()
    gevent.sleep(0.3)  # paused: nothing more may arrive in this window
    assert len(held) == 5 and reader.total_rdy == 0
    reader.max_in_flight = 20
    wait_until(lambda: len(held) == 20, timeout=10)
    for message in held[5:]:
        message.finish()
    wait_until(lambda: drained(nsqd, TOPIC, CHANNEL), timeout=10)
    reader.close()


def test_writer_callbacks(nsqd: NsqdServer) -> None:
    answers: list[tuple[Any, Any]] = []

    def callback(conn: Any, data: Any) -> None:
        answers.append((conn, data))

    writer = nsq.Writer([nsqd.tcp_address])
    writer.pub(TOPIC, b"early", callback)  # not started: no open connection
    assert answers[0][0] is None and isinstance(answers[0][1], nsq.SendError)
    writer.start()
    writer.pub(TOPIC, b"one", callback)
    writer.mpub(TOPIC, [b"two", b"three"], callback)
    writer.dpub(TOPIC, 100, b"four", callback)
    wait_until(lambda: len(answers) == 4, timeout=10)
    for conn, data in answers[1:]:
        assert data == b"OK" and conn.id == nsqd.tcp_address
    writer.pub(TOPIC, b"", callback)  # nsqd refuses an empty body
    wait_until(lambda: len(answers) == 5, timeout=10)
    assert isinstance(answers[4][1], nsq.Error) and b"E_BAD_MESSAGE" in answers[4][1].args[0]
    wait_until(lambda: topic_stats(nsqd, TOPIC).get("message_count") == 4, timeout=10)
    writer.close()
    assert writer.conns == {}


def test_writer_close_waits_for_every_answer(nsqd: NsqdServer) -> None:
    answers: list[Any] = []
    writer = nsq.Writer(nsqd.tcp_address)
    writer.start()
    for i in range(200):
        writer.pub(TOPIC, b"%d" % i, lambda conn, data: answers.append(data))
    writer.close()
    assert answers == [b"OK"] * 200
    assert topic_stats(nsqd, TOPIC)["message_count"] == 200


def test_skip_close_wait_ends_a_writers_wait_and_fails_what_is_unanswered(
    nsqd: NsqdServer, fault_proxy: Callable[[str], FaultProxy]
) -> None:
    """What run() does on a second Ctrl-C: the close stops waiting, the callback is told."""
    proxy = fault_proxy(nsqd.tcp_address)
    answers: list[Any] = []
    writer = nsq.Writer(proxy.address)
    writer.start()
    proxy.stall()  # nsqd's answer never comes back
    writer.pub(TOPIC, b"unanswered", lambda conn, data: answers.append(data))
    assert writer.pending() == 1
    closing = gevent.spawn(writer.close)  # would wait close_timeout (5 s) for the answer
    assert writer.skip_close_wait() == 1
    closing.join(timeout=2)
    assert closing.ready(), "close() still waits for the answer"
    assert len(answers) == 1 and isinstance(answers[0], nsq.ConnectionClosedError), answers


def test_run_starts_everything_and_stop_closes_it_drained(nsqd: NsqdServer) -> None:
    writer = nsq.Writer([nsqd.tcp_address])
    seen: list[bytes] = []
    release = gevent.event.Event()

    def handler(message: nsq.Message) -> bool:
        seen.append(message.body)
        if message.body == b"slow":
            release.wait()  # still running when stop() comes: close() lets it finish
        else:
            writer.pub("echo", message.body)
        return True

    reader = make_reader(nsqd, handler)
    runner_greenlet = gevent.spawn(nsq.run)
    wait_until(lambda: reader.started and writer.started, timeout=10)
    late = make_reader(nsqd, lambda m: True, cls=nsq.Reader, channel="late")
    wait_until(lambda: late.started, timeout=10)
    publish(nsqd, [b"a", b"b", b"slow"])
    wait_until(lambda: len(seen) == 3, timeout=10)
    nsq.stop()
    gevent.sleep(0.1)
    assert not runner_greenlet.ready()  # draining: the slow handler still runs
    release.set()
    runner_greenlet.get(timeout=20)
    assert reader.consumer.closed and late.consumer.closed
    assert runner._registry.clients == []
    assert drained(nsqd, TOPIC, CHANNEL)
    assert topic_stats(nsqd, "echo")["message_count"] == 2
