"""Transcripts: the exact commands ``Link``, ``FlowControl`` and ``LinkSet`` write.

As go-nsq's consumer tests do (they script nsqd and assert ``RDY 5``,
``FIN ...``, ``RDY 0``, ``REQ ... 0``): a fake connection records each
command it is asked to write, encoded by :mod:`gnsqlite.protocol.commands`
as nsqd would read it, and each test compares the whole transcript. No
socket, no server; the flow is never started, so no timer runs.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, ClassVar, cast

import gevent
import pytest

from gnsqlite.config import ConnectionConfig, ConsumerConfig
from gnsqlite.connection import Connection
from gnsqlite.connection.reader import message_sink
from gnsqlite.consumer import links as links_module
from gnsqlite.consumer.dispatch import Dispatcher
from gnsqlite.consumer.flow_control import FlowControl
from gnsqlite.consumer.lifecycle import Lifecycle
from gnsqlite.consumer.link import Intake, Link, LinkRoutes
from gnsqlite.consumer.links import ConnectionHooks, LinkSet, Subscription
from gnsqlite.consumer.settle import Settler
from gnsqlite.errors import BrokenConnectionError
from gnsqlite.flow import make_backoff_strategy
from gnsqlite.message import Message
from gnsqlite.protocol import commands
from gnsqlite.testing import wait_until
from gnsqlite.timers import TimerWheel

pytestmark = pytest.mark.no_server


class FakeConnection:
    """A subscribed connection that records what it is asked to write.

    Built like :class:`gnsqlite.connection.Connection` (the link set builds it);
    ``written`` holds each command as nsqd reads it, without the newline
    (a command's body, if any, left out).
    """

    made: ClassVar[list[FakeConnection]] = []

    def __init__(self, address: str, config: Any = None, **callbacks: Any) -> None:
        self.name = address
        self.callbacks = callbacks
        self.max_rdy_count = 2500
        self.msg_timeout = 60.0
        self.last_received = 0.0
        self.closed = False
        self.error: Exception | None = None
        self.written: list[str] = []
        FakeConnection.made.append(self)

    def _write(self, command: bytes) -> None:
        self.written.append(command.split(b"\n")[0].decode())

    def connect(self) -> None:
        pass

    def subscribe(self, topic: str, channel: str, timeout: float | None = None) -> None:
        self._write(commands.sub(topic, channel))

    def ready(self, count: int) -> None:
        self._write(commands.rdy(count))

    def finish(self, message_id: bytes, now: bool = False) -> None:
        self._write(commands.fin(message_id))

    def finish_many(self, message_ids: list[bytes]) -> None:
        for message_id in message_ids:
            self._write(commands.fin(message_id))

    def requeue(self, message_id: bytes, delay: float = 0.0) -> None:
        self._write(commands.req(message_id, delay))

    def touch(self, message_id: bytes) -> None:
        self._write(commands.touch(message_id))

    def start_close(self) -> None:
        self._write(commands.cls())

    def close(self, timeout: float | None = None) -> None:
        self.closed = True

    def lose(self, error: Exception) -> None:
        """The connection broke: as the real one, closed, then ``on_close``."""
        self.closed = True
        self.error = error
        self.callbacks["on_close"](self, error)


def as_connection(fake: FakeConnection) -> Connection:
    """The fake where the link expects a Connection (it uses only what the fake has)."""
    return cast(Connection, fake)


def wire(n: int) -> Message:
    """A message as the frame decoder builds it (the link completes it)."""
    return Message(f"{n:016d}".encode(), b"body", 0, 1, "", None, 60.0)  # type: ignore[arg-type]


def mid(n: int) -> str:
    return f"{n:016d}"


class Rig:
    """Flow control and links for one consumer, wired as ``Consumer`` wires them."""

    def __init__(self, max_in_flight: int, backoff: Any = None) -> None:
        self.life = Lifecycle(owner="transcript")
        self.config = ConsumerConfig(max_in_flight=max_in_flight)
        self.flow = FlowControl(
            self.config, make_backoff_strategy(backoff), random.Random(1), self.life
        )
        self.taken: list[Message] = []
        taken = self.taken

        class Taking(Intake):
            def enqueue(self, message: Message) -> None:
                taken.append(message)

        self.routes = LinkRoutes(
            self.flow,
            Taking(),
            lambda attempts: 1.5 * attempts,
            [],
            self.life,
        )

    def link(self, address: str) -> tuple[Link, FakeConnection]:
        """A link subscribed on a fake connection, counted by flow control."""
        link = Link(address, False, self.routes)
        conn = FakeConnection(address)
        link.attach(as_connection(conn))
        link.subscribed()
        self.flow.add(link, conn.max_rdy_count)
        return link, conn


def test_a_link_writes_rdy_then_its_share_fin_and_on_failure_rdy_0_before_req() -> None:
    rig = Rig(max_in_flight=5, backoff="exponential")
    link, conn = rig.link("127.0.0.1:4150")
    assert conn.written == ["RDY 1"]  # a new connection starts at RDY 1
    link.on_message(as_connection(conn), wire(1))  # its first message opens its share
    assert conn.written == ["RDY 1", "RDY 5"]
    link.on_message(as_connection(conn), wire(2))
    first, second = rig.taken
    assert first.finish() and not first.finish()  # a second answer writes nothing
    # A handler failure: RDY 0 goes out before the REQ (backoff), as go-nsq does.
    assert second.requeue(backoff=True)
    link.start_close()
    assert conn.written == [
        "RDY 1",
        "RDY 5",
        f"FIN {mid(1)}",
        "RDY 0",
        f"REQ {mid(2)} 1500",  # requeue_delay(attempts=1) = 1.5 s
        "CLS",
    ]
    assert link.counts() == {"received": 2, "finished": 1, "requeued": 1}


def test_a_links_on_message_makes_it_its_connections_message_sink() -> None:
    # What the link set hands each Connection as on_message: the compiled reader then
    # calls the link directly (tests/unit/test_connection.py has the rule itself).
    link, _ = Rig(max_in_flight=1).link("127.0.0.1:4150")
    assert message_sink(link.on_message) is link


def test_a_requeue_without_backoff_writes_req_only_and_touch_writes_touch() -> None:
    rig = Rig(max_in_flight=1, backoff="exponential")
    link, conn = rig.link("127.0.0.1:4150")
    link.on_message(as_connection(conn), wire(7))
    (message,) = rig.taken
    assert message.touch()
    assert message.requeue(0.0, backoff=False)
    assert conn.written == ["RDY 1", f"TOUCH {mid(7)}", f"REQ {mid(7)} 0"]


def test_a_closing_consumer_requeues_what_arrives_and_a_left_link_counts_nothing() -> None:
    rig = Rig(max_in_flight=2)
    link, conn = rig.link("127.0.0.1:4150")
    rig.life.begin_close()
    rig.flow.pause()  # as close() does first
    link.on_message(as_connection(conn), wire(3))  # on the wire before RDY 0 arrived
    assert rig.taken == []  # never reaches a handler
    assert conn.written == ["RDY 1", "RDY 0", f"REQ {mid(3)} 0"]
    link.leave()
    # a late message on a link that left: back to nsqd
    link.on_message(as_connection(conn), wire(4))
    assert conn.written[-1] == f"REQ {mid(4)} 0"
    assert link.counts() == {"received": 1, "finished": 0, "requeued": 1}


def test_flow_control_rotates_scarce_rdy_and_hands_a_lost_links_rdy_on() -> None:
    rig = Rig(max_in_flight=1)
    _, conn_a = rig.link("a:4150")
    _, conn_b = rig.link("b:4150")
    assert (conn_a.written, conn_b.written) == (["RDY 1"], [])  # b waits its turn
    rig.flow.remove("a:4150")  # a's connection ended
    assert conn_b.written == ["RDY 1"]
    assert conn_a.written == ["RDY 1"]  # nothing more is written to a gone connection


def test_flow_control_backoff_writes_rdy_0_everywhere_then_the_shares_again() -> None:
    rig = Rig(max_in_flight=4, backoff="exponential")
    a, conn_a = rig.link("a:4150")
    _, conn_b = rig.link("b:4150")
    a.on_message(as_connection(conn_a), wire(1))  # a's share opens: 2 of 4, b keeps its RDY 1
    rig.flow.pause()  # a backoff window
    rig.flow.send(rig.flow.planner.resume(0.0))  # what the window's end does, without timers
    assert conn_a.written == ["RDY 1", "RDY 2", "RDY 0", "RDY 2"]
    assert conn_b.written == ["RDY 1", "RDY 0", "RDY 1"]


def test_backoff_pauses_probes_and_only_the_successes_it_counts_bring_the_share_back() -> None:
    """Flow control keeps whether successes count (the backoff's level above 0) beside the
    backoff: each failure pauses, each success after a probe steps the level down, and
    only the one that reaches level 0 gives the full share back."""
    rig = Rig(max_in_flight=5, backoff="exponential")
    link, conn = rig.link("127.0.0.1:4150")

    def delivered(n: int) -> Message:
        link.on_message(as_connection(conn), wire(n))
        return rig.taken[-1]

    m1, m2, m3, m4, m5 = (delivered(n) for n in range(1, 6))
    conn.written.clear()
    assert m1.requeue(backoff=True)  # level 1
    rig.flow._window_ended()  # what the window's timer does: a probe
    assert m2.finish() and m3.finish()  # level 0, then a success that counts for nothing
    assert conn.written == [
        "RDY 0",  # a failure pauses every connection, before its REQ
        f"REQ {m1.id} 1500",
        "RDY 1",  # the window's end probes with one message
        f"FIN {m2.id}",
        "RDY 5",  # back at level 0: the full share
        f"FIN {m3.id}",
    ]
    conn.written.clear()
    assert m4.requeue(backoff=True)  # level 1 again
    rig.flow._window_ended()
    assert m5.requeue(backoff=True)  # the probe fails: level 2
    rig.flow._window_ended()
    assert delivered(6).finish()  # level 1: another window, not the share
    rig.flow._window_ended()
    assert delivered(7).finish()  # level 0
    assert conn.written == [
        "RDY 0",
        f"REQ {m4.id} 1500",
        "RDY 1",
        "RDY 0",
        f"REQ {m5.id} 1500",
        "RDY 1",
        "FIN 0000000000000006",
        "RDY 0",
        "RDY 1",
        "FIN 0000000000000007",
        "RDY 5",
    ]


class Hooks:
    def __init__(self) -> None:
        self.lost: list[tuple[str, Exception | None]] = []

    def hooks(self) -> ConnectionHooks:
        return ConnectionHooks(
            lambda conn: None,
            lambda conn, error: self.lost.append((conn.name, error)),
            lambda conn, error: None,
        )


@pytest.fixture
def fake_connections(monkeypatch: pytest.MonkeyPatch) -> list[FakeConnection]:
    """The link set builds fake connections (a test's monkeypatch, not the library's)."""
    FakeConnection.made = []
    monkeypatch.setattr(links_module, "Connection", FakeConnection)
    return FakeConnection.made


def link_set(rig: Rig, static: tuple[str, ...], hooks: Hooks) -> LinkSet:
    dispatcher = Dispatcher(
        Settler(rig.config, None, None, lambda nsqd: None), rig.flow, rig.life, 1
    )
    subscription = Subscription("clicks", "archive", static, (), rig.config, ConnectionConfig())
    return LinkSet(
        subscription, rig.flow, dispatcher, rig.routes, hooks.hooks(), rig.life, random.Random(1)
    )


def until(condition: Callable[[], bool]) -> None:
    wait_until(condition, timeout=5)


def test_a_link_set_subscribes_each_nsqd_shares_rdy_and_closes_with_cls(
    fake_connections: list[FakeConnection],
) -> None:
    rig = Rig(max_in_flight=4)
    hooks = Hooks()
    links = link_set(rig, ("a:4150", "b:4150"), hooks)
    wheel = TimerWheel.for_hub()
    try:
        links.start(wheel)
        until(lambda: len(links.links) == 2)
        a, b = (links.links[name] for name in ("a:4150", "b:4150"))
        conn_a, conn_b = a.conn, b.conn
        assert isinstance(conn_a, FakeConnection) and isinstance(conn_b, FakeConnection)
        assert conn_a.written == ["SUB clicks archive", "RDY 1"]
        assert conn_b.written == ["SUB clicks archive", "RDY 1"]
        a.on_message(as_connection(conn_a), wire(1))  # a's first message opens its share: 2 of 4
        assert conn_a.written[2:] == ["RDY 2"]
        # b's connection breaks: the loss is reported, b is gone, and the
        # budget b held (nothing in flight) goes to a at once.
        conn_b.lose(BrokenConnectionError("b:4150", "reset"))
        assert hooks.lost and hooks.lost[0][0] == "b:4150"
        assert list(links.links) == ["a:4150"]
        assert conn_a.written[3:] == ["RDY 4"]
        rig.life.begin_close()
        rig.flow.pause()
        links.start_close()
        links.requeue_unanswered()
        links.close(1.0)
        assert conn_a.written[4:] == ["RDY 0", "CLS", f"REQ {mid(1)} 0"]
        assert conn_a.closed and links.links == {}
        assert links.by_nsqd()["a:4150"] == {
            "received": 1,
            "finished": 0,
            "requeued": 1,
            "given_up": 0,
            "expired": 0,
            "touches": 0,
        }
    finally:
        wheel.cancel_owner("transcript")
        gevent.sleep(0)


class BrokenConnection(FakeConnection):
    """Every write fails as a connection that just ended fails it."""

    def _write(self, command: bytes) -> None:
        raise BrokenConnectionError(self.name, "write failed")


def test_answers_and_rdy_on_a_broken_connection_are_dropped_quietly_and_counted() -> None:
    # Link.on_finish writes Link._quietly's except clause out (the per-message
    # path); RDY, REQ, TOUCH and the FIN of a batch call _quietly: all alike.
    rig = Rig(max_in_flight=3)
    link = Link("a:4150", False, rig.routes)
    conn = BrokenConnection("a:4150")
    link.attach(as_connection(conn))
    link.subscribed()
    rig.flow.add(link, conn.max_rdy_count)  # RDY 1 fails: nothing raised
    for n in range(4):
        link.on_message(as_connection(conn), wire(n))
    first, second, third, fourth = rig.taken
    assert first.finish()  # handed to the link; the write failed, nsqd redelivers
    assert second.requeue(0.0, backoff=False)
    assert third.touch()
    link.on_finish_many([third, fourth])
    link.ready(2)
    assert conn.written == []
    assert link.counts() == {"received": 4, "finished": 3, "requeued": 1}
    assert link.unanswered == set()
