"""The Producer's objects on their own, and a publish as a transcript, with no socket.

``MemoryConnection`` has the public surface of :class:`~gnsqlite.connection.Connection`
that the producer uses (``connect``, ``request_encoded``, ``close``, ``join``,
``name``, ``last_received``) on the pure client protocol: what it records is
exactly what a connection would write, and :meth:`MemoryConnection.answer`
routes nsqd's answers (``OK`` or an error frame) to their waiters as the
connection's reader does.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Iterator
from typing import Any, ClassVar

import gevent
import gevent.event
import pytest

import gnsqlite.producer.pool
from gnsqlite.config import ConnectionConfig, ProducerConfig
from gnsqlite.errors import (
    BrokenConnectionError,
    ConfigError,
    ConnectionClosedError,
    NoConnectionsError,
    NSQTimeoutError,
    error_from_frame,
)
from gnsqlite.producer import Producer
from gnsqlite.producer.attempt import Attempt
from gnsqlite.producer.deadlines import GRACE, Deadlines
from gnsqlite.producer.stats import PublishStats
from gnsqlite.protocol import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_RESPONSE,
    ClientConnection,
    ErrorReceived,
    Response,
    encode_frame,
)
from gnsqlite.timers import TimerWheel

pytestmark = pytest.mark.no_server

OK_FRAME = encode_frame(FRAME_TYPE_RESPONSE, b"OK")


class MemoryConnection:
    """A connection in memory; see the module docstring. ``refused`` addresses fail to connect."""

    made: ClassVar[list[MemoryConnection]] = []
    refused: ClassVar[set[str]] = set()

    def __init__(self, address: str, config: ConnectionConfig, on_close: Any = None) -> None:
        self.name = address
        self.config = config
        self.on_close = on_close
        self.protocol = ClientConnection()
        self.written: list[bytes] = []
        self.sent = gevent.event.Event()  # set by each request written
        self.closed = False
        self.last_received = time.monotonic()

    def connect(self) -> dict[str, Any]:
        if self.name in self.refused:
            raise BrokenConnectionError(self.name, "connect failed: refused (scripted)")
        self.protocol.start({"feature_negotiation": True})
        self.protocol.receive_data(encode_frame(FRAME_TYPE_RESPONSE, json.dumps({}).encode()))
        self.protocol.events()
        self.made.append(self)
        return {}

    def request_encoded(self, waiter: Any, command: str, data: bytes, now: bool = False) -> None:
        if self.closed:
            raise ConnectionClosedError(self.name, "closed")
        self.written.append(self.protocol.publish_encoded(command, data, waiter))
        self.sent.set()

    def answer(self, frames: bytes) -> None:
        """nsqd's frames arrive: each answer goes to the waiter of the oldest request."""
        self.protocol.receive_data(frames)
        for event in self.protocol.events():
            if isinstance(event, Response):
                event.waiter.set(event.data)
            elif isinstance(event, ErrorReceived):
                event.waiter.set_exception(event.error)

    def close(self) -> None:
        """As a connection closes: its unanswered requests fail, then ``on_close`` runs."""
        self.closed = True
        for waiter in self.protocol.connection_lost():
            waiter.set_exception(ConnectionClosedError(self.name, "closed"))
        if self.on_close is not None:
            self.on_close(self, None)

    def join(self, timeout: float | None = None) -> bool:
        return True


@pytest.fixture
def memory(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[MemoryConnection]]:
    monkeypatch.setattr(MemoryConnection, "made", [])
    monkeypatch.setattr(MemoryConnection, "refused", set())
    monkeypatch.setattr(gnsqlite.producer.pool, "Connection", MemoryConnection)
    yield MemoryConnection


# -- a publish, as a transcript ---------------------------------------------


def test_a_publish_writes_one_pub_and_returns_when_its_ok_is_routed_back(
    memory: type[MemoryConnection],
) -> None:
    with Producer("127.0.0.1:4150") as producer:
        (conn,) = memory.made
        caller = gevent.spawn(producer.publish, "orders", b"hello")
        assert conn.sent.wait(5)
        assert conn.written == [b"PUB orders\n\x00\x00\x00\x05hello"]
        assert not caller.ready()  # blocks until nsqd answers
        assert producer.stats()["in_flight"] == 1
        conn.answer(OK_FRAME)
        assert caller.get(timeout=5) is None
        assert producer.publish_async("orders", b"x", defer=1.5).ready() is False
        assert conn.written[1] == b"DPUB orders 1500\n\x00\x00\x00\x01x"
        conn.answer(OK_FRAME)
        stats = producer.stats()
    assert stats["publishes"] == [
        {"topic": "orders", "command": "dpub", "count": 1, "messages": 1},
        {"topic": "orders", "command": "pub", "count": 1, "messages": 1},
    ]
    assert stats["in_flight"] == 0 and stats["errors"] == {}


def test_pipelined_publishes_get_the_answers_in_the_order_they_were_written(
    memory: type[MemoryConnection],
) -> None:
    with Producer("127.0.0.1:4150") as producer:
        (conn,) = memory.made
        results = [producer.publish_async("t", b"%d" % i) for i in range(3)]
        results.append(producer.multi_publish_async("t", [b"a", b"bc"]))
        assert conn.written[:3] == [b"PUB t\n\x00\x00\x00\x01%d" % i for i in range(3)]
        assert conn.written[3] == b"MPUB t\n\x00\x00\x00\x0f\x00\x00\x00\x02" + (
            b"\x00\x00\x00\x01a\x00\x00\x00\x02bc"
        )
        conn.answer(OK_FRAME * 2)
        assert [r.ready() for r in results] == [True, True, False, False]
        conn.answer(OK_FRAME * 2)
        assert [r.get(timeout=5) for r in results] == [b"OK"] * 4
        assert producer.stats()["totals"]["messages"] == 5


def test_a_refused_publish_is_written_again_on_the_other_connection(
    memory: type[MemoryConnection],
) -> None:
    with Producer(["127.0.0.1:4150", "127.0.0.1:4151"]) as producer:
        first, second = memory.made
        result = producer.publish_async("t", b"x")
        sent_on, other = (first, second) if first.written else (second, first)
        assert sent_on.written == [b"PUB t\n\x00\x00\x00\x01x"] and other.written == []
        sent_on.answer(encode_frame(FRAME_TYPE_ERROR, b"E_PUB_FAILED disk full"))
        assert other.written == [b"PUB t\n\x00\x00\x00\x01x"]  # the same bytes
        other.answer(OK_FRAME)
        assert result.get(timeout=5) == b"OK"
        assert producer.stats()["errors"] == {}


def test_a_publish_refused_everywhere_is_tried_once_on_each_then_names_every_refusal(
    memory: type[MemoryConnection],
) -> None:
    addresses = ["127.0.0.1:4150", "127.0.0.1:4151", "127.0.0.1:4152"]
    with Producer(addresses, timeout=0.5) as producer:
        result = producer.publish_async("t", b"x")
        refused: list[MemoryConnection] = []
        for turn in range(3):  # each refusal sends it on to a connection not tried yet
            (conn,) = [c for c in memory.made if c.written and c not in refused]
            conn.answer(encode_frame(FRAME_TYPE_ERROR, b"E_PUB_FAILED full %d" % turn))
            refused.append(conn)
        with pytest.raises(NoConnectionsError) as info:
            result.get(timeout=5)
    assert sorted(info.value.errors) == addresses  # each one's own refusal
    assert sorted(str(e) for e in info.value.errors.values()) == [
        f"E_PUB_FAILED full {turn}" for turn in range(3)
    ]
    assert [len(c.written) for c in memory.made] == [1, 1, 1]  # none tried twice


def test_with_no_nsqd_a_publish_waits_then_names_each_address_and_its_error(
    memory: type[MemoryConnection],
) -> None:
    memory.refused.add("127.0.0.1:4150")
    with Producer("127.0.0.1:4150", timeout=0.05) as producer:
        with pytest.raises(NoConnectionsError, match="refused") as info:
            producer.publish("t", b"x")
        assert list(info.value.errors) == ["127.0.0.1:4150"]
        assert producer.stats()["errors"] == {"no_connections": 1}


def test_a_sent_publish_nsqd_never_answers_times_out_and_is_counted(
    memory: type[MemoryConnection],
) -> None:
    with Producer("127.0.0.1:4150") as producer:
        (conn,) = memory.made
        with pytest.raises(NSQTimeoutError, match=r"within 0\.05 s"):
            producer.publish("t", b"x", timeout=0.05)
        assert conn.written == [b"PUB t\n\x00\x00\x00\x01x"]
        assert producer.stats()["errors"] == {"timeout": 1}
        assert producer.stats()["in_flight"] == 0


def test_closing_fails_a_publish_in_flight_without_sending_it_elsewhere_or_parking_it(
    memory: type[MemoryConnection],
) -> None:
    producer = Producer(["127.0.0.1:4150", "127.0.0.1:4151"])
    producer.start()
    result = producer.publish_async("t", b"x")
    producer.close()
    assert isinstance(result.exception, ConnectionClosedError)
    assert sorted(len(conn.written) for conn in memory.made) == [0, 1]  # written once
    assert TimerWheel.for_hub().owned_by(producer) == []
    assert producer.stats()["in_flight"] == 0


# -- config means the producer's own settings --------------------------------


def test_config_is_the_producers_own_settings_and_connection_config_the_connections() -> None:
    producer = Producer("127.0.0.1:4150", timeout=2.0, max_body_size=1000, snappy=True)
    assert isinstance(producer.config, ProducerConfig)
    assert (producer.config.timeout, producer.config.max_body_size) == (2.0, 1000)
    assert producer.config.max_message_size == ProducerConfig().max_message_size
    assert producer.connection_config == ConnectionConfig(snappy=True)
    for copied in ("timeout", "max_message_size", "max_body_size", "producer_config"):
        assert not hasattr(producer, copied), f"Producer.{copied} is a copy of its config"
    given = ProducerConfig(timeout=3.0)
    assert Producer("127.0.0.1:4150", config=given).config is given


def test_a_connection_config_as_config_still_works_and_says_where_it_goes() -> None:
    tls = ConnectionConfig(heartbeat_interval=10.0)
    with pytest.warns(DeprecationWarning, match="connection_config="):
        producer = Producer("127.0.0.1:4150", config=tls)  # type: ignore[arg-type]
    assert producer.connection_config is tls
    assert producer.config == ProducerConfig()


def test_the_same_option_given_twice_or_a_wrong_config_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match="timeout either in config= or as keywords"):
        Producer("127.0.0.1:4150", config=ProducerConfig(), timeout=1.0)
    with pytest.raises(ConfigError, match="connection_config= or as keywords"):
        Producer("127.0.0.1:4150", connection_config=ConnectionConfig(), snappy=True)
    with pytest.raises(ConfigError, match="must be a ProducerConfig, not dict"):
        Producer("127.0.0.1:4150", config={"timeout": 1.0})  # type: ignore[arg-type]
    with warnings.catch_warnings(), pytest.raises(ConfigError, match="pass one ConnectionConfig"):
        warnings.simplefilter("ignore")
        Producer(
            "127.0.0.1:4150",
            config=ConnectionConfig(),  # type: ignore[arg-type]
            connection_config=ConnectionConfig(),
        )


# -- Attempt, through the interface it reports to ---------------------------


class RecordingRoute:
    """An :class:`~gnsqlite.producer.attempt.AttemptRoute` that records each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def done(self, attempt: Attempt, error: BaseException | None) -> None:
        self.calls.append(("done", attempt, error))

    def answered_with_error(self, attempt: Attempt, conn: Any, error: BaseException) -> None:
        self.calls.append(("answered_with_error", attempt, conn, error))


def attempt_for(route: RecordingRoute, timeout: float = 5.0) -> Attempt:
    return Attempt(route, "PUB", b"PUB t\n", time.monotonic() + timeout, timeout, "t", 1)


def test_an_answer_is_reported_once_and_resolves_the_result() -> None:
    route = RecordingRoute()
    attempt = attempt_for(route)
    result = attempt.result
    attempt.set(b"OK")
    attempt.set(b"OK")  # a second answer is not the caller's business
    assert route.calls == [("done", attempt, None)]
    assert result.get(block=False) == b"OK"
    assert (attempt.ended, attempt.value, attempt.error) == (True, b"OK", None)


def test_an_error_from_its_connection_goes_to_the_route_with_that_connection() -> None:
    route = RecordingRoute()
    attempt = attempt_for(route)
    error = error_from_frame(b"E_PUB_FAILED x")
    attempt.set_exception(error)  # never sent: nothing to report
    assert route.calls == []
    attempt.conn = conn = object()  # type: ignore[assignment]
    attempt.set_exception(error)
    assert route.calls == [("answered_with_error", attempt, conn, error)]
    assert not attempt.ended  # the route decides: retry or fail


def test_a_failed_attempt_holds_its_error_for_a_result_made_later() -> None:
    route = RecordingRoute()
    attempt = attempt_for(route)
    error = ConnectionClosedError("a", "closed")
    attempt.failed(error)
    assert attempt.result.exception is error
    assert route.calls == []  # failing is the route's own call: it counts it itself


# -- Deadlines --------------------------------------------------------------


class Watched:
    """Started :class:`Deadlines`, the attempts handed to its ``on_late``, and its timers' owner.

    ``on_late`` fails the attempt and wakes its caller, as the router does.
    """

    def __init__(self) -> None:
        self.late: list[Attempt] = []
        self.owner = object()  # the producer, in a Producer
        self.deadlines = Deadlines(self.on_late, self.owner)
        self.deadlines.start(TimerWheel.for_hub(), gevent.get_hub().loop)

    def on_late(self, attempt: Attempt) -> None:
        self.late.append(attempt)
        attempt.failed(NSQTimeoutError("late"))
        self.deadlines.woken(attempt)

    def timers(self) -> int:
        return len(TimerWheel.for_hub().owned_by(self.owner))


@pytest.fixture
def watched() -> Iterator[Watched]:
    watched = Watched()
    yield watched
    TimerWheel.for_hub().cancel_owner(watched.owner)


def test_wait_returns_at_once_for_an_ended_attempt_and_raises_its_error(watched: Watched) -> None:
    deadlines = watched.deadlines
    answered = attempt_for(RecordingRoute())
    answered.set(b"OK")
    deadlines.wait(answered)
    refused = attempt_for(RecordingRoute())
    refused.failed(error_from_frame(b"E_BAD_TOPIC x"))
    with pytest.raises(Exception, match="E_BAD_TOPIC"):
        deadlines.wait(refused)
    assert watched.late == [] and (deadlines.blocked, deadlines.resuming) == (0, 0)
    assert watched.timers() == 0  # nothing waited: no timer


def test_a_blocked_caller_is_woken_by_woken_and_counted_until_it_runs(watched: Watched) -> None:
    deadlines = watched.deadlines
    attempt = attempt_for(RecordingRoute())
    caller = gevent.spawn(deadlines.wait, attempt)
    gevent.idle()
    assert (deadlines.blocked, deadlines.resuming) == (1, 0)
    attempt.set(b"OK")
    deadlines.woken(attempt)
    assert (deadlines.blocked, deadlines.resuming) == (0, 1)
    caller.get(timeout=5)
    assert (deadlines.blocked, deadlines.resuming) == (0, 0)
    assert watched.late == []


def test_the_late_are_handed_on_after_their_deadline_with_one_timer_for_all(
    watched: Watched,
) -> None:
    deadlines = watched.deadlines
    soon = attempt_for(RecordingRoute(), timeout=0.01)
    later = [attempt_for(RecordingRoute(), timeout=0.2 + i) for i in range(3)]
    callers = [gevent.spawn(deadlines.wait, a) for a in [soon, *later]]
    gevent.idle()
    assert watched.timers() == 1  # not one per caller
    with pytest.raises(NSQTimeoutError):
        callers[0].get(timeout=5)
    assert watched.late == [soon]
    assert time.monotonic() >= soon.deadline + GRACE
    for attempt in later:
        attempt.set(b"OK")
        deadlines.woken(attempt)
    gevent.joinall(callers[1:], timeout=5, raise_error=True)
    assert watched.late == [soon] and (deadlines.blocked, deadlines.resuming) == (0, 0)


def test_answered_waits_are_let_go_while_a_long_one_waits_and_it_is_still_handed_on(
    watched: Watched,
) -> None:
    deadlines = watched.deadlines
    long = attempt_for(RecordingRoute(), timeout=0.3)
    waiting = gevent.spawn(deadlines.wait, long)
    gevent.idle()
    held = []
    for _ in range(1000):  # callers publishing in turn behind the long wait
        attempt = attempt_for(RecordingRoute(), timeout=5)
        caller = gevent.spawn(deadlines.wait, attempt)
        gevent.idle()
        attempt.set(b"OK")
        deadlines.woken(attempt)
        caller.get(timeout=5)
        held.append(len(deadlines._timed))
    assert max(held) <= 64 + 1  # the answered ones are dropped, not kept for the long one
    with pytest.raises(NSQTimeoutError):
        waiting.get(timeout=5)
    assert watched.late == [long] and (deadlines.blocked, deadlines.resuming) == (0, 0)


def test_a_wait_cut_short_leaves_no_caller_counted_and_a_closed_one_hands_on_at_once(
    watched: Watched,
) -> None:
    deadlines = watched.deadlines
    attempt = attempt_for(RecordingRoute())
    with pytest.raises(gevent.Timeout), gevent.Timeout(0.01):
        deadlines.wait(attempt)
    assert (deadlines.blocked, deadlines.resuming) == (0, 0)
    deadlines.close()
    fresh = attempt_for(RecordingRoute())
    with pytest.raises(NSQTimeoutError):
        deadlines.wait(fresh)
    assert watched.late == [fresh]


# -- PublishStats -------------------------------------------------------------


def test_stats_count_answers_and_failures_and_a_failing_timing_hook_costs_nothing() -> None:
    stats = PublishStats()
    seen: list[tuple[str, str]] = []

    def timing(topic: str, command: str, seconds: float) -> None:
        seen.append((topic, command))
        raise ValueError("a metrics bug")

    stats.timing = timing
    stats.count("t", "mpub", 3, time.monotonic(), None)
    stats.count("t", "pub", 1, None, NoConnectionsError({}, "none"))
    report = stats.report(["a:1"], [], {"a:1": BrokenConnectionError("a:1", "refused")})
    assert report["publishes"] == [{"topic": "t", "command": "mpub", "count": 1, "messages": 3}]
    assert report["errors"] == {"no_connections": 1}
    (row,) = report["connections"]
    assert row == {"address": "a:1", "connected": False, "last_error": row["last_error"]}
    assert "refused" in row["last_error"]
    assert seen == [("t", "mpub")]  # timed only when started is given


def test_stats_count_each_topic_and_command_apart_however_they_alternate() -> None:
    stats = PublishStats()
    calls = [("orders", "pub", 1), ("clicks", "pub", 1), ("orders", "pub", 1)]
    calls += [("orders", "mpub", 5), ("orders", "pub", 1)]
    for topic, command, messages in calls:
        # Equal names that are other objects (a topic read from a file, a command
        # built): counted under the same key as the first.
        name = "".join(list(topic))
        assert name == topic and name is not topic
        stats.count(name, command, messages, None, None)
    assert stats.report([], [], {})["publishes"] == [
        {"topic": "clicks", "command": "pub", "count": 1, "messages": 1},
        {"topic": "orders", "command": "mpub", "count": 1, "messages": 5},
        {"topic": "orders", "command": "pub", "count": 3, "messages": 3},
    ]
