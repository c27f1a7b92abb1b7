"""One timer wheel per gevent hub, driven by a single hub timer.

Heartbeat checks, RDY redistribution, backoff windows, lookupd polls and
reconnects all want "call this in *n* seconds" or "every *n* seconds". Rather
than a ``spawn_later`` greenlet each (which nobody can find to stop), every
such call is an entry in the hub's :class:`TimerWheel`. The wheel keeps its
entries in a heap and arms one libev/libuv timer for the earliest deadline;
when it fires, the due callbacks run, in order, in one short-lived greenlet
owned by the wheel (so a callback may block briefly, for example to send).

Every entry has an **owner**. ``wheel.cancel_owner(consumer)`` cancels all of
a consumer's timers at once when it closes, so nothing it scheduled can run
afterwards.

The scheduling logic (:class:`TimerQueue`) is pure and takes ``now`` as an
argument, so tests can drive it with a fake clock; :class:`TimerWheel` adds
the hub timer on top. Durations are float seconds; the clock is
``time.monotonic``.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

import gevent
import gevent.pool
from gevent.hub import Hub, get_hub

__all__ = ["Timer", "TimerQueue", "TimerWheel"]

log = logging.getLogger(__name__)

#: Cancelled entries the heap may hold (and more than its live ones) before it
#: is rebuilt without them.
COMPACT_AT = 64


def _released(*args: Any) -> None:
    """What a cancelled timer calls: nothing (its callback and args are let go)."""


class Timer:
    """A scheduled call; :meth:`cancel` stops it (and its repeats)."""

    __slots__ = ("_queue", "active", "args", "callback", "deadline", "interval", "owner")

    def __init__(
        self,
        queue: TimerQueue,
        deadline: float,
        interval: float | None,
        callback: Callable[..., Any],
        args: tuple[Any, ...],
        owner: object,
    ) -> None:
        self._queue = queue
        self.deadline = deadline
        self.interval = interval
        self.callback = callback
        self.args = args
        self.owner = owner
        self.active = True

    def __repr__(self) -> str:
        kind = f"every {self.interval} s" if self.interval is not None else "once"
        state = "active" if self.active else "cancelled"
        return f"<Timer {getattr(self.callback, '__qualname__', self.callback)} {kind} {state}>"

    def cancel(self) -> bool:
        """Stop the timer; ``True`` if it was still active. Safe to call twice.

        Lets go of its callback, args and owner at once (its deadline may be
        a minute away: a heartbeat watchdog's), so a closed connection it
        pointed to is freed now.
        """
        if not self.active:
            return False
        self._queue.cancel(self)
        return True

    def fire(self) -> bool:
        """Run the callback unless cancelled; ``True`` if it ran.

        A one-shot timer is spent afterwards. Exceptions propagate.
        """
        if not self.active:
            return False
        if self.interval is None:
            self._queue.discard(self)
        self.callback(*self.args)
        return True


class TimerQueue:
    """The pure part of the wheel: a heap of deadlines, grouped by owner.

    Nothing here reads a clock: :meth:`schedule` takes the deadline and
    :meth:`pop_due` takes ``now``. A cancelled entry lets go of what it
    referred to at once, and stays in the heap until it surfaces (it is
    skipped then) or until cancelled entries are more than
    :data:`COMPACT_AT` and than the live ones: the heap is rebuilt then.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._owners: dict[object, set[Timer]] = {}
        self._cancelled = 0  # cancellations since the heap was last rebuilt (an upper bound)

    @property
    def entries(self) -> int:
        """The heap's size: active timers plus cancelled ones not yet dropped."""
        return len(self._heap)

    def __len__(self) -> int:
        return sum(len(timers) for timers in self._owners.values())

    def schedule(
        self,
        deadline: float,
        callback: Callable[..., Any],
        args: tuple[Any, ...] = (),
        *,
        owner: object,
        interval: float | None = None,
    ) -> Timer:
        """Add a timer due at ``deadline``; with ``interval``, it repeats."""
        if owner is None:
            raise ValueError("every timer needs an owner that cancels it on close")
        if interval is not None and not interval > 0:
            raise ValueError(f"a repeating timer needs an interval above 0 s, not {interval!r}")
        timer = Timer(self, deadline, interval, callback, args, owner)
        self._owners.setdefault(owner, set()).add(timer)
        heapq.heappush(self._heap, (deadline, next(self._seq), timer))
        return timer

    def discard(self, timer: Timer) -> None:
        """Deactivate ``timer`` (a one-shot about to fire: it keeps its callback)."""
        timer.active = False
        self._forget(timer)

    def cancel(self, timer: Timer) -> None:
        """Cancel ``timer``: deactivate it and let go of its callback, args and owner."""
        self.discard(timer)
        self._release(timer)

    def _release(self, timer: Timer) -> None:
        timer.callback, timer.args, timer.owner = _released, (), None
        self._cancelled += 1
        heap = self._heap
        if self._cancelled > COMPACT_AT and 2 * self._cancelled > len(heap):
            heap[:] = [entry for entry in heap if entry[2].active]
            heapq.heapify(heap)
            self._cancelled = 0

    def _forget(self, timer: Timer) -> None:
        timers = self._owners.get(timer.owner)
        if timers is not None:
            timers.discard(timer)
            if not timers:
                del self._owners[timer.owner]

    def cancel_owner(self, owner: object) -> int:
        """Cancel every timer of ``owner``; returns how many were active."""
        timers = self._owners.pop(owner, set())
        for timer in timers:
            timer.active = False
            self._release(timer)
        return len(timers)

    def owned_by(self, owner: object) -> list[Timer]:
        """The active timers of ``owner``."""
        return list(self._owners.get(owner, ()))

    def next_deadline(self) -> float | None:
        """The earliest deadline of an active timer, or ``None`` when there is none."""
        heap = self._heap
        while heap and not heap[0][2].active:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_due(self, now: float) -> list[Timer]:
        """Remove and return the timers due at ``now``, earliest first.

        Call :meth:`Timer.fire` on each: a timer cancelled in between (by an
        earlier callback of the same tick) does not run.

        A repeating timer is scheduled again at ``deadline + interval`` (or
        ``now + interval`` when it fell more than a whole interval behind),
        so it keeps its rhythm without bursts of catch-up calls.
        """
        due: list[Timer] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, timer = heapq.heappop(heap)
            if not timer.active:
                continue
            due.append(timer)
            # A one-shot stays its owner's until fired, so cancel_owner() still
            # reaches it between this pop and the runner greenlet firing it.
            if timer.interval is not None:
                timer.deadline += timer.interval
                if timer.deadline <= now:
                    timer.deadline = now + timer.interval
                heapq.heappush(heap, (timer.deadline, next(self._seq), timer))
        return due


_WHEELS: weakref.WeakKeyDictionary[Hub, TimerWheel] = weakref.WeakKeyDictionary()


class TimerWheel:
    """The timers of one hub, on one hub timer; see the module docstring.

    Use :meth:`for_hub` to get the current hub's wheel. Callbacks run in a
    greenlet of the wheel; an exception in one is logged and does not stop
    the others or later ticks.
    """

    def __init__(self, hub: Hub | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.hub = hub if hub is not None else get_hub()
        self.clock = clock
        self.queue = TimerQueue()
        self._watcher: Any = None
        self._armed_for: float | None = None
        self._runners = gevent.pool.Group()

    @classmethod
    def for_hub(cls, hub: Hub | None = None) -> TimerWheel:
        """The wheel of ``hub`` (default: the current thread's hub), created on first use."""
        hub = hub if hub is not None else get_hub()
        wheel = _WHEELS.get(hub)
        if wheel is None:
            wheel = _WHEELS[hub] = cls(hub)
        return wheel

    def __len__(self) -> int:
        """How many timers are active."""
        return len(self.queue)

    def call_later(
        self, delay: float, callback: Callable[..., Any], *args: Any, owner: object
    ) -> Timer:
        """Call ``callback(*args)`` once, ``delay`` seconds from now. Does not block."""
        timer = self.queue.schedule(self.clock() + max(0.0, delay), callback, args, owner=owner)
        self._arm()
        return timer

    def call_every(
        self,
        interval: float,
        callback: Callable[..., Any],
        *args: Any,
        owner: object,
        first: float | None = None,
    ) -> Timer:
        """Call ``callback(*args)`` every ``interval`` seconds (first after ``first``
        seconds, default one interval) until cancelled. Does not block."""
        delay = interval if first is None else max(0.0, first)
        timer = self.queue.schedule(
            self.clock() + delay, callback, args, owner=owner, interval=interval
        )
        self._arm()
        return timer

    def cancel_owner(self, owner: object) -> int:
        """Cancel every timer of ``owner``; returns how many were active."""
        count = self.queue.cancel_owner(owner)
        self._arm()
        return count

    def owned_by(self, owner: object) -> list[Timer]:
        """The active timers of ``owner`` (tests use it to prove a close cancelled them)."""
        return self.queue.owned_by(owner)

    def _arm(self) -> None:
        deadline = self.queue.next_deadline()
        if deadline is None:
            if self._watcher is not None:
                self._watcher.stop()
            self._armed_for = None
            return
        if self._armed_for is not None and self._armed_for <= deadline and self._watcher.active:
            return
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher.close()
        after = max(0.0, deadline - self.clock())
        self._watcher = self.hub.loop.timer(after)
        self._armed_for = deadline
        self._watcher.start(self._tick)

    def _tick(self) -> None:
        # Runs in the hub: it must not block, so the callbacks run in a greenlet.
        self._armed_for = None
        due = self.queue.pop_due(self.clock())
        if due:
            self._runners.spawn(self._run, due)
        self._arm()

    @staticmethod
    def _run(due: list[Timer]) -> None:
        for timer in due:
            try:
                timer.fire()
            except Exception:
                log.exception("timer callback %r failed", timer)
