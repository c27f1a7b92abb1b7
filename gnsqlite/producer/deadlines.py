"""The deadlines of the callers blocked on a producer's publishes.

:class:`Deadlines` blocks a caller until its :class:`~.attempt.Attempt`
has ended, and hands the attempts still unanswered a grace after their
deadline to ``on_late`` (the producer's router, which fails them). One timer
of the hub's wheel, at the earliest deadline, serves every blocked caller,
instead of a gevent ``Timeout`` per call. It also counts the callers blocked
and those just woken, which the producer reads to decide whether a blocking
publish is sent at once or with the hub's flush (see
:meth:`~gnsqlite.producer.router.Router.submit`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, Final

from gevent.hub import Waiter

from ..timers import Timer, TimerWheel
from .attempt import Attempt

__all__ = ["GRACE", "Deadlines"]

#: A blocking call gives up this long (seconds) after its attempt's deadline, so
#: an attempt parked without a connection fails with NoConnectionsError first.
GRACE: Final = 0.05
#: Waiter, bound once: a Final is a C global in the compiled build (a plain global
#: is a dict lookup per blocking publish).
_Waiter: Final = Waiter
#: Waiter.switch unbound: the hub calls it with the waiter, where ``waiter.switch``
#: would make a bound method object per publish (some 400 instructions with its release).
_switch: Final = Waiter.switch
#: The waits watched are sifted for ended ones when there are this many, or twice
#: as many as the last sifting kept: memory follows the waits still on, at a
#: constant cost per wait.
_KEEP_AT_LEAST: Final = 64


class Deadlines:
    """Waiting for attempts, and handing the late ones on; see the module docstring.

    ``on_late(attempt)`` must end the attempt (it runs in the hub, from the
    timer, and must not block). Timers are owned by ``owner`` (the producer,
    which cancels them when it closes). :meth:`start` must be called in the
    hub's thread before :meth:`wait`.
    """

    __slots__ = (
        "_closed",
        "_due",
        "_head",
        "_limit",
        "_loop",
        "_on_late",
        "_owner",
        "_timed",
        "_timer",
        "_wheel",
        "blocked",
        "resuming",
    )

    def __init__(self, on_late: Callable[[Attempt], None], owner: object) -> None:
        self._on_late = on_late
        self._owner = owner
        self._wheel: TimerWheel | None = None
        self._loop: Any = None  # the hub's loop: wakes blocked callers
        self._closed = False
        # Attempts a caller blocks on, in the order the waits began, from _head on
        # (a list and an index: the compiled build indexes a list in place).
        self._timed: list[Attempt] = []
        self._head = 0
        self._limit = _KEEP_AT_LEAST  # its length when the ended ones are dropped
        self._timer: Timer | None = None  # at the earliest deadline (plus GRACE)
        self._due = math.inf  # when _timer fires
        #: Callers blocked in :meth:`wait` on an attempt not yet ended.
        self.blocked = 0
        #: Callers whose attempt has ended who have not run since.
        self.resuming = 0

    def start(self, wheel: TimerWheel, loop: Any) -> None:
        """Use ``wheel`` for the deadline timer and ``loop`` (the hub's) to wake callers."""
        self._wheel = wheel
        self._loop = loop

    def close(self) -> None:
        """Stop watching; later waits hand their attempt to ``on_late`` at once.

        The timer itself is cancelled with the owner's others. Does not block.
        """
        self._closed = True
        self._timed = []
        self._head = 0
        self._timer = None
        self._due = math.inf

    def wait(self, attempt: Attempt) -> None:
        """Block until ``attempt`` has ended or its deadline (plus :data:`GRACE`) passed.

        Raises the attempt's error, if it ended with one.
        """
        if not attempt.ended:
            self._watch(attempt)
        if not attempt.ended:
            wake: Waiter[None] = _Waiter()
            attempt.wake = wake
            self.blocked += 1
            try:
                wake.get()  # switched to by the hub after woken()
            finally:
                attempt.wake = None
                if attempt.ended:
                    self.resuming -= 1  # moved from blocked by woken()
                else:  # the wait was cut short (a Timeout, a kill)
                    self.blocked -= 1
        if attempt.error is not None:
            raise attempt.error

    def woken(self, attempt: Attempt) -> None:
        """``attempt`` has just ended: wake its blocked caller, if any.

        The caller runs in a later callback of the hub, after whatever is
        resolving answers now has finished (as a link on the result would,
        for less). Does not block.
        """
        wake = attempt.wake
        if wake is not None:
            attempt.wake = None
            self.blocked -= 1
            self.resuming += 1
            self._loop.run_callback(_switch, wake, None)

    def _watch(self, attempt: Attempt) -> None:
        """Hand ``attempt`` on if it is still unanswered ``GRACE`` s after its deadline."""
        if self._closed or self._wheel is None:
            self._on_late(attempt)
            return
        timed = self._timed
        head, end = self._head, len(timed)
        while head < end and timed[head].ended:  # answered ones leave, in order
            head += 1
        if head == end:  # every earlier wait is over (a caller publishing in turn)
            self._timed = [attempt]
            self._head = 0
        else:
            self._head = head
            if end >= self._limit:  # a wait still on ahead of many ended ones: drop those
                timed = self._keep([other for other in timed[head:] if not other.ended])
            timed.append(attempt)
        due = attempt.deadline + GRACE
        if due < self._due:
            self._arm(due)

    def _keep(self, timed: list[Attempt]) -> list[Attempt]:
        """Watch ``timed`` (the waits still on, in order) from now on; returns it."""
        self._timed = timed
        self._head = 0
        self._limit = max(_KEEP_AT_LEAST, 2 * len(timed))
        return timed

    def _arm(self, due: float) -> None:
        wheel = self._wheel
        if wheel is None:  # not started: nothing waits
            return
        if self._timer is not None:
            self._timer.cancel()
        self._due = due
        self._timer = wheel.call_later(
            max(0.0, due - time.monotonic()), self._check, owner=self._owner
        )

    def _check(self) -> None:
        """The deadline timer fired: hand on the late attempts, arm for the next."""
        self._timer = None
        self._due = math.inf
        now = time.monotonic()
        kept: list[Attempt] = []  # the waits still on that are not late
        late: list[Attempt] = []
        next_due = math.inf
        for attempt in self._timed[self._head :]:
            if attempt.ended:
                continue
            due = attempt.deadline + GRACE
            if due <= now:
                late.append(attempt)
            else:
                kept.append(attempt)
                next_due = min(next_due, due)
        self._keep(kept)
        for attempt in late:
            self._on_late(attempt)
        if kept and not self._closed:
            self._arm(next_due)
