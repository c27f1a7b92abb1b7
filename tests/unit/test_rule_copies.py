"""The consumer's per-message copies of a rule agree with the rule they name.

Each rule is written once (``message.connection_gone``, ``Settler.gives_up``
and ``Settler.expired`` through ``Settler._skips``, ``settle.finish_handled``,
``Leases.watch``); the per-message paths ``Message.finish`` and
``Settler.settle`` carry copies that name them. These tests drive the copy
and the original over the same cases and compare what a user sees: whether
the handler ran, what was answered, when the lease timer is due.
"""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from gnsqlite.config import ConsumerConfig
from gnsqlite.consumer.lease import Leases
from gnsqlite.consumer.settle import Settler
from gnsqlite.message import Message, connection_gone
from gnsqlite.timers import TimerWheel

pytestmark = pytest.mark.no_server


class Conn:
    def __init__(self, closed: bool) -> None:
        self.closed = closed


class NoClosed:
    """A connection-like object without ``closed`` (a user's own message)."""


class Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def on_finish(self, message: Message) -> None:
        self.calls.append("FIN")

    def on_requeue(self, message: Message, delay: float | None, backoff: bool) -> None:
        self.calls.append("REQ")

    def on_touch(self, message: Message) -> None:
        self.calls.append("TOUCH")


def message(connection: Any, attempts: int = 1, age: float = 0.0) -> tuple[Message, Recorder]:
    """A message ``age`` seconds old by its timestamp."""
    recorder = Recorder()
    stamp = time.time_ns() - round(age * 1e9)
    return (
        Message(b"0" * 16, b"body", stamp, attempts, "n:4150", recorder, 60.0, connection),
        recorder,
    )


@pytest.mark.parametrize("connection", [None, NoClosed(), Conn(False), Conn(True)])
def test_finish_sends_exactly_when_connection_gone_says_the_connection_lives(
    connection: Any,
) -> None:
    msg, recorder = message(connection)
    sent = msg.finish()
    assert sent is (not connection_gone(connection))
    assert recorder.calls == (["FIN"] if sent else [])
    # requeue and touch ask the rule itself: the same answer.
    other, _ = message(connection)
    assert other.touch() is sent
    assert other.requeue() is sent


@pytest.mark.parametrize("max_attempts", [0, 1, 3])
@pytest.mark.parametrize("attempts", [1, 2, 3, 4, 70000])
@pytest.mark.parametrize("closed", [False, True])
@pytest.mark.parametrize(("max_age", "age"), [(None, 1e6), (60.0, 1.0), (60.0, 120.0)])
def test_settle_runs_the_handler_exactly_when_skips_says_so(
    max_attempts: int, attempts: int, closed: bool, max_age: float | None, age: float
) -> None:
    config = ConsumerConfig(max_attempts=max_attempts, max_age=max_age)
    settler = Settler(config, None, None, lambda nsqd: None)
    settler.on_giving_up = lambda message: None
    single, single_calls = message(Conn(closed), attempts, age)
    ran: list[Message] = []
    settler.settle(single, ran.append)

    probe, _ = message(Conn(closed), attempts, age)
    skipped = settler._skips(probe)  # the original (it gives up a message past max_attempts)
    assert skipped is (closed or settler.expired(probe) or settler.gives_up(attempts))
    assert (ran == []) is skipped
    # The batch path asks the original: the same messages reach the handler,
    # and the same answers go out (FIN after success, FIN when given up).
    batch, batch_calls = message(Conn(closed), attempts, age)
    ran_batch: list[list[Message]] = []
    settler.settle_batch([batch], ran_batch.append)
    assert (ran_batch == []) is skipped
    assert single_calls.calls == batch_calls.calls


@pytest.mark.parametrize("is_async", [False, True])
def test_the_success_step_is_the_same_for_a_message_and_a_batch(is_async: bool) -> None:
    settler = Settler(ConsumerConfig(), None, None, lambda nsqd: None)
    single, single_calls = message(Conn(False))
    batch, batch_calls = message(Conn(False))
    if is_async:
        single.enable_async()
        batch.enable_async()
    settler.settle(single, lambda m: None)
    settler.settle_batch([batch], lambda ms: None)
    assert single_calls.calls == batch_calls.calls == ([] if is_async else ["FIN"])


@pytest.mark.parametrize("max_lease", [math.inf, None])
@pytest.mark.parametrize("armed_in", [None, 10.0, 1000.0])
def test_settle_arms_the_lease_timer_exactly_when_leases_watch_would(
    max_lease: float | None, armed_in: float | None
) -> None:
    # A message due for a touch in 30 s (msg_timeout 60 s); the lease timer
    # not armed, or armed for 10 s or 1000 s from now.
    def leases() -> Leases:
        kept = Leases(max_lease)
        kept.start(TimerWheel.for_hub())
        if armed_in is not None and kept.enabled:
            kept._arm(armed_in)
        return kept

    by_copy, by_original = leases(), leases()
    settler = Settler(ConsumerConfig(), None, None, lambda nsqd: None, leases=by_copy)
    settler.settle(message(Conn(False))[0], lambda m: None)
    by_original.watch(message(Conn(False))[0])
    assert by_copy.next_due == pytest.approx(by_original.next_due, abs=0.01)
    if max_lease is None:
        assert by_copy.next_due == -math.inf  # off: never armed
    for kept in (by_copy, by_original):
        kept.stop()
