"""The timer queue with a fake clock, and the hub-driven wheel for real."""

from __future__ import annotations

import gc
import weakref

import gevent
import gevent.event
import pytest

from gnsqlite.timers import COMPACT_AT, TimerQueue, TimerWheel

pytestmark = pytest.mark.no_server


def test_queue_orders_by_deadline_and_repeats_keep_their_rhythm() -> None:
    q = TimerQueue()
    calls: list[str] = []
    q.schedule(2.0, calls.append, ("b",), owner="o")
    q.schedule(1.0, calls.append, ("a",), owner="o")
    q.schedule(1.5, calls.append, ("tick",), owner="o", interval=1.0)
    assert q.next_deadline() == 1.0
    for t in q.pop_due(2.0):
        t.fire()
    assert calls == ["a", "tick", "b"]
    assert q.next_deadline() == 2.5  # the repeat, 1.5 + 1.0
    for t in q.pop_due(10.0):  # fell far behind: no burst of catch-up calls
        t.fire()
    assert calls.count("tick") == 2
    assert q.next_deadline() == 11.0


def test_cancel_owner_stops_everything_it_scheduled() -> None:
    q = TimerQueue()
    calls: list[int] = []
    q.schedule(1.0, calls.append, (1,), owner="mine")
    q.schedule(1.0, calls.append, (2,), owner="mine", interval=0.5)
    q.schedule(1.0, calls.append, (3,), owner="theirs")
    assert q.cancel_owner("mine") == 2
    assert q.owned_by("mine") == []
    for t in q.pop_due(5.0):
        t.fire()
    assert calls == [3]


def test_a_timer_cancelled_by_an_earlier_callback_of_the_same_tick_does_not_run() -> None:
    q = TimerQueue()
    calls: list[str] = []
    second = q.schedule(1.0, calls.append, ("second",), owner="o")
    q.schedule(0.5, lambda: second.cancel(), owner="o")
    for t in q.pop_due(1.0):
        t.fire()
    assert calls == []


def test_every_timer_needs_an_owner() -> None:
    with pytest.raises(ValueError, match="owner"):
        TimerQueue().schedule(1.0, print, owner=None)


def test_wheel_runs_callbacks_on_the_hub_and_cancels_by_owner() -> None:
    wheel = TimerWheel.for_hub()
    assert TimerWheel.for_hub() is wheel
    owner = object()
    done = gevent.event.Event()
    ticks: list[int] = []
    third = gevent.event.Event()

    def tick() -> None:
        ticks.append(1)
        if len(ticks) == 3:
            third.set()

    wheel.call_every(0.01, tick, owner=owner)
    wheel.call_later(0.05, done.set, owner=owner)
    # Events, not a count after a fixed time: a loaded hub may coalesce late ticks.
    assert third.wait(5.0) and done.wait(5.0)
    assert wheel.cancel_owner(owner) == 1  # the repeat; the one-shot is spent
    count = len(ticks)
    gevent.sleep(0.1)  # several periods: a repeat that survived the cancel would tick
    assert len(ticks) == count
    assert wheel.owned_by(owner) == []


def test_a_failing_callback_is_logged_and_does_not_stop_the_wheel(
    caplog: pytest.LogCaptureFixture,
) -> None:
    wheel = TimerWheel.for_hub()
    owner = object()
    done = gevent.event.Event()

    def boom() -> None:
        raise RuntimeError("boom")

    wheel.call_later(0.0, boom, owner=owner)
    wheel.call_later(0.01, done.set, owner=owner)
    assert done.wait(2.0)
    assert "boom" in caplog.text
    wheel.cancel_owner(owner)


def test_cancel_owner_reaches_a_timer_already_due_but_not_yet_fired() -> None:
    q = TimerQueue()
    calls: list[str] = []
    q.schedule(1.0, calls.append, ("late",), owner="o")
    due = q.pop_due(1.0)  # the wheel hands these to a runner greenlet ...
    assert q.owned_by("o") == due
    assert q.cancel_owner("o") == 1  # ... and the owner closes before it runs
    for t in due:
        t.fire()
    assert calls == []
    assert q.owned_by("o") == []
    assert len(q) == 0


def test_a_fired_one_shot_timer_is_forgotten() -> None:
    q = TimerQueue()
    calls: list[int] = []
    q.schedule(1.0, calls.append, (1,), owner="o")
    assert [t.fire() for t in q.pop_due(1.0)] == [True]
    assert calls == [1]
    assert q.owned_by("o") == []
    assert len(q) == 0


class Held:
    """Something a timer's callback refers to (a connection, with its buffers)."""

    def ping(self) -> None:
        pass


def test_a_cancelled_timer_lets_go_of_what_it_referred_to_before_its_deadline() -> None:
    """A closed connection's 60 s heartbeat watchdog must not keep it alive for a minute."""
    q = TimerQueue()
    held, owner = Held(), Held()
    watched = weakref.ref(held), weakref.ref(owner)
    timer = q.schedule(60.0, held.ping, (held,), owner=owner)
    q.schedule(61.0, held.ping, owner=owner)
    assert timer.cancel() and q.cancel_owner(owner) == 1
    del held, owner
    gc.collect()
    assert [ref() for ref in watched] == [None, None]
    assert q.next_deadline() is None and q.pop_due(100.0) == []


def test_cancelled_entries_do_not_pile_up_in_the_heap() -> None:
    """A reconnect storm cancels a far-off timer per connection: the heap stays small."""
    q = TimerQueue()
    keep = q.schedule(1e9, print, owner="kept")
    for n in range(5000):
        q.schedule(1000.0 + n, print, owner=n).cancel()
        q.schedule(1000.0 + n, print, owner=f"o{n}")
        q.cancel_owner(f"o{n}")
    assert q.entries <= 2 * COMPACT_AT + 2
    assert len(q) == 1 and q.owned_by("kept") == [keep]
    assert q.next_deadline() == 1e9
