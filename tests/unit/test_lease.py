"""Leases alone and in the settler: the one TOUCH rule, its bound, and no TOUCH after the answer.

Messages are built by hand with a recording responder and a connection
stand-in that says nsqd's ``max_msg_timeout``; the hub's real timer wheel
drives the touches, with msg_timeouts of a fraction of a second. Waits are
on conditions (the recorded touches, the wheel's timers of the leases).
"""

from __future__ import annotations

import math
import time
from typing import Any

import gevent
import gevent.event
import pytest

from gnsqlite import ConfigError
from gnsqlite.config import ConsumerConfig
from gnsqlite.consumer import Consumer
from gnsqlite.consumer.lease import TOUCH_RATIO, Leases
from gnsqlite.consumer.settle import Settler
from gnsqlite.deadletter import HandlerError
from gnsqlite.message import Message
from gnsqlite.testing import wait_until
from gnsqlite.timers import TimerWheel

pytestmark = pytest.mark.no_server


class Conn:
    """A connection as the leases see it: open or closed, and nsqd's max_msg_timeout."""

    def __init__(self, max_msg_timeout: float = 900.0) -> None:
        self.closed = False
        self.max_msg_timeout = max_msg_timeout


class Recorder:
    """A Responder recording (action, monotonic time)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []

    def on_finish(self, message: Message) -> None:
        self.calls.append(("finish", time.monotonic()))

    def on_requeue(self, message: Message, delay: float | None, backoff: bool) -> None:
        self.calls.append(("requeue", time.monotonic()))

    def on_touch(self, message: Message) -> None:
        self.calls.append(("touch", time.monotonic()))

    def touches(self) -> list[float]:
        return [at for action, at in self.calls if action == "touch"]


def make(msg_timeout: float, conn: Any = None, timestamp: int = 0) -> tuple[Message, Recorder]:
    recorder = Recorder()
    conn = conn if conn is not None else Conn()
    message = Message(b"0" * 16, b"body", timestamp, 1, "nsqd:4150", recorder, msg_timeout, conn)
    return message, recorder


def leases(max_lease: float | None = math.inf) -> tuple[Leases, list[str], TimerWheel]:
    counted: list[str] = []
    wheel = TimerWheel.for_hub()
    kept = Leases(max_lease, counted.append)
    kept.start(wheel)
    return kept, counted, wheel


def timer_spent(kept: Leases, wheel: TimerWheel) -> bool:
    """The leases' timer fired and was not armed again (nothing left to touch)."""
    return not wheel.owned_by(kept)


def test_a_held_message_is_touched_before_its_timeout_and_not_after_its_answer() -> None:
    kept, counted, wheel = leases()
    message, recorder = make(1.0)
    delivered = message._deadline - 1.0
    kept.hold(message)
    wait_until(lambda: len(recorder.touches()) >= 3, timeout=10)
    # Each touch came once less than half the timeout was left, never after it ran out.
    previous = delivered
    for at in recorder.touches():
        assert 1.0 * TOUCH_RATIO - 0.01 <= at - previous < 1.0, recorder.calls
        previous = at
    assert message.finish() is True
    sent = len(recorder.touches())
    wait_until(lambda: timer_spent(kept, wheel), timeout=5)  # the next tick came and went
    assert len(recorder.touches()) == sent  # no TOUCH after FIN
    assert recorder.calls[-1][0] == "finish"
    assert kept.held == 0 and kept.touches == sent and counted == ["nsqd:4150"] * sent
    kept.stop()


@pytest.mark.parametrize("where", ["max_lease", "nsqd"])
def test_touches_stop_once_the_lease_reaches_its_bound(where: str) -> None:
    # msg_timeout 0.8 s, bound 2.0 s: touches at about 0.4, 0.8, 1.2 s after
    # delivery (leases to 1.2, 1.6, 2.0 s); the next would go past the bound.
    bound = 2.0
    kept, _, wheel = leases(bound if where == "max_lease" else math.inf)
    message, recorder = make(0.8, Conn(max_msg_timeout=bound if where == "nsqd" else 900.0))
    delivered = message._deadline - 0.8
    kept.hold(message)
    wait_until(lambda: kept.held == 0, timeout=10, message="the lease ended at its bound")
    assert len(recorder.touches()) == 3, recorder.calls
    assert bound <= message._deadline - delivered < bound + 0.8 * TOUCH_RATIO
    wait_until(lambda: timer_spent(kept, wheel), timeout=5)
    assert len(recorder.touches()) == 3
    kept.stop()


@pytest.mark.parametrize("max_lease", [0, 0.0, None])
def test_no_lease_is_extended_when_turned_off(max_lease: float | None) -> None:
    kept, _, wheel = leases(max_lease)
    message, _ = make(0.05)
    kept.hold(message)
    assert kept.held == 0 and not wheel.owned_by(kept) and not kept.enabled
    assert kept.stats() == {"max_lease": None, "held": 0, "touches": 0}


def test_a_message_whose_connection_ended_is_let_go_untouched() -> None:
    kept, _, wheel = leases()
    conn = Conn()
    message, recorder = make(0.2, conn)
    kept.hold(message)
    conn.closed = True
    wait_until(lambda: timer_spent(kept, wheel), timeout=5)
    assert recorder.calls == [] and kept.held == 0


def test_stop_cancels_the_timer() -> None:
    kept, _, wheel = leases()
    message, _ = make(10.0)
    kept.hold(message)
    assert wheel.owned_by(kept)
    kept.stop()
    assert not wheel.owned_by(kept) and kept.held == 0


# -- in the settler: while a handler function runs ----------------------------------


def run(settle: Settler, kept: Leases, message: Message, handler: Any) -> None:
    """What a dispatcher's worker does: record what it runs, settle it, forget it."""
    running: dict[Any, object] = kept.running  # type: ignore[assignment]
    running[gevent.getcurrent()] = message
    try:
        settle.settle(message, handler)
    finally:
        running.pop(gevent.getcurrent(), None)


def settler(**options: Any) -> tuple[Settler, Leases, list[str]]:
    expired: list[str] = []
    kept, _, _ = leases(options.pop("max_lease", math.inf))
    kept.running = {}
    config = ConsumerConfig(**options)
    return (
        Settler(config, None, None, lambda n: None, count_expired=expired.append, leases=kept),
        kept,
        expired,
    )


@pytest.mark.parametrize("outcome", ["returns", "raises"])
def test_a_slow_handler_function_is_touched_while_it_runs_and_no_longer(outcome: str) -> None:
    settle, kept, _ = settler(requeue_delay=0.0)
    message, recorder = make(0.2)
    release = gevent.event.Event()

    def handler(message: Message) -> None:
        release.wait(5)
        if outcome == "raises":
            raise ValueError("failed after a long while")

    worker = gevent.spawn(run, settle, kept, message, handler)
    wait_until(lambda: len(recorder.touches()) >= 3, timeout=5)
    assert kept.held == 1
    release.set()
    worker.get(timeout=5)
    assert kept.held == 0  # let go as the handler returned
    answer = "finish" if outcome == "returns" else "requeue"
    assert recorder.calls[-1][0] == answer
    kept.stop()


def test_a_handler_past_its_bound_is_not_touched_again_when_another_message_comes() -> None:
    # msg_timeout 0.8 s, max_lease 2.0 s: three touches, then the lease is over
    # while the handler still runs; a second message re-arms the timer.
    settle, kept, _ = settler(max_lease=2.0)
    wheel = TimerWheel.for_hub()
    first, first_calls = make(0.8)
    release = gevent.event.Event()
    slow = gevent.spawn(run, settle, kept, first, lambda m: release.wait(20))
    wait_until(lambda: len(first_calls.touches()) == 3 and timer_spent(kept, wheel), timeout=10)
    second, second_calls = make(0.8)
    other = gevent.spawn(run, settle, kept, second, lambda m: release.wait(20))
    wait_until(lambda: len(second_calls.touches()) >= 2, timeout=10)
    assert len(first_calls.touches()) == 3  # its lease stays over
    release.set()
    gevent.joinall([slow, other], timeout=5, raise_error=True)
    kept.stop()


def test_an_async_message_is_let_go_when_its_handler_returns() -> None:
    settle, kept, _ = settler()
    message, recorder = make(0.2)
    run(settle, kept, message, lambda m: m.enable_async())
    assert kept.held == 0 and recorder.calls == []
    wheel = TimerWheel.for_hub()
    wait_until(lambda: timer_spent(kept, wheel), timeout=5)
    assert recorder.calls == []  # not touched after its handler returned
    kept.stop()


# -- max_age ------------------------------------------------------------------------


def test_an_expired_message_is_finished_without_its_handler() -> None:
    settle, kept, expired = settler(max_age=1.0)
    old, old_calls = make(60.0, timestamp=time.time_ns() - 2_000_000_000)
    fresh, fresh_calls = make(60.0, timestamp=time.time_ns())
    ran: list[Message] = []
    settle.settle(old, ran.append)
    settle.settle(fresh, ran.append)
    assert ran == [fresh]
    assert [a for a, _ in old_calls.calls] == ["finish"]
    assert [a for a, _ in fresh_calls.calls] == ["finish"]
    assert expired == ["nsqd:4150"]
    assert settle.expired(old) and not settle.expired(fresh)
    kept.stop()


class DeadLetters:
    def __init__(self, ok: bool) -> None:
        self.ok = ok
        self.published: list[tuple[bytes, HandlerError | None]] = []

    def publish(self, message: Message, error: HandlerError | None = None) -> bool:
        self.published.append((message.body, error))
        return self.ok


@pytest.mark.parametrize("ok", [True, False])
def test_an_expired_message_goes_to_the_dead_letter_topic_or_is_requeued(ok: bool) -> None:
    expired: list[str] = []
    dead = DeadLetters(ok)
    config = ConsumerConfig(max_age=1.0, dead_letter_topic="t.dead")
    settle = Settler(config, None, dead, lambda n: None, count_expired=expired.append)  # type: ignore[arg-type]
    message, calls = make(60.0, timestamp=time.time_ns() - 5_000_000_000)
    settle.settle(message, lambda m: pytest.fail("an expired message reached the handler"))
    assert len(dead.published) == 1
    error = dead.published[0][1]
    assert error is not None and error.type == "MessageExpired"
    assert "above max_age=1.0 s" in error.message
    assert [a for a, _ in calls.calls] == (["finish"] if ok else ["requeue"])
    assert expired == (["nsqd:4150"] if ok else [])


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("max_lease", -1.0, r"max_lease=-1.0 is out of range: use 0.0 s or more, or None"),
        ("max_age", -0.5, r"max_age=-0.5 is out of range: use above 0.0 s, or None"),
        ("max_age", 0, r"max_age=0 is out of range: use above 0.0 s"),
        ("max_lease", "long", r"max_lease='long' must be float"),
    ],
)
def test_bad_bounds_are_refused_saying_what_to_give(option: str, value: Any, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        Consumer("t", "c", lambda m: None, nsqd_tcp_addresses="127.0.0.1:1", **{option: value})
