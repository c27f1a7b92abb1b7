"""A publish on its way, and the deadlines of the callers waiting for one.

An :class:`Attempt` is one publish call travelling over a producer's
connections until nsqd accepts it or it gives up; it is the
:class:`~gnsqlite.connection.AnswerWaiter` the connection's reader answers directly.
:class:`Deadlines` (a mixin of :class:`~gnsqlite.producer.Producer`) blocks
a caller until its attempt is answered and fails the late ones, with one
timer of the hub's wheel at the earliest deadline (owned by the producer)
instead of a gevent ``Timeout`` per call.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

import gevent.event
from gevent.hub import Waiter

from .connection import Connection
from .errors import ConnectionClosedError, NSQTimeoutError
from .timers import Timer, TimerWheel

__all__ = ["GRACE", "Attempt", "AttemptOwner", "Deadlines"]

#: A blocking call gives up this long (seconds) after its attempt's deadline, so
#: an attempt parked without a connection fails with NoConnectionsError first.
GRACE = 0.05
_GRACE = GRACE


class AttemptOwner(Protocol):
    """What an attempt reports to: the producer that sent it."""

    def _done(self, attempt: Attempt, error: BaseException | None) -> None: ...

    def _answered_with_error(
        self, attempt: Attempt, conn: Connection, error: BaseException
    ) -> None: ...


class Attempt:
    """One publish call travelling over connections until it succeeds or gives up.

    It is also the :class:`~gnsqlite.connection.AnswerWaiter` of the connection it was
    last sent on (one at a time: it moves on only after that one failed),
    which the connection's reader calls directly.
    """

    __slots__ = (
        "_result", "command", "conn", "data", "deadline", "ended", "error", "errors", "expiry",
        "messages", "producer", "timeout", "topic", "tried", "value", "wake",
    )  # fmt: skip

    def __init__(
        self, producer: AttemptOwner, command: str, data: bytes, deadline: float, timeout: float,
        topic: str, messages: int,
    ) -> None:  # fmt: skip
        self.producer = producer
        self.command = command  # "PUB", "MPUB" or "DPUB"
        self.topic = topic  # for the producer's counters
        self.messages = messages
        self.data = data  # the whole request, the same bytes for any connection
        self.ended = False  # nsqd took it (value), or it failed for good (error)
        self.error: BaseException | None = None
        self.value: bytes  # nsqd's answer, once ended without error
        self._result: gevent.event.AsyncResult[bytes] | None = None  # made by .result
        self.deadline = deadline  # time.monotonic() after which it is not retried
        self.timeout = timeout  # seconds: what the caller allowed
        self.errors: dict[str, BaseException] = {}
        self.tried: set[Connection] = set()
        self.conn: Connection | None = None  # where it was sent last
        # While a caller blocks in Producer._wait for it: what wakes that caller
        # (cheaper than a link on the result, which publish_async callers use).
        self.wake: Waiter[None] | None = None
        #: While it waits for a connection: the timer that gives it up at its deadline.
        self.expiry: Timer | None = None

    @property
    def result(self) -> gevent.event.AsyncResult[bytes]:
        """The outcome as an ``AsyncResult`` (publish_async's), made on first use.

        A blocking caller never asks for it: it waits on :attr:`wake` and
        reads :attr:`ended`, :attr:`value` and :attr:`error`.
        """
        result = self._result
        if result is None:
            result = self._result = gevent.event.AsyncResult()
            if self.ended:
                if self.error is None:
                    result.set(self.value)
                else:
                    result.set_exception(self.error)
        return result

    def set(self, value: bytes) -> None:
        """nsqd answered on :attr:`conn`."""
        if not self.ended:
            self.ended = True
            self.value = value
            if self._result is not None:
                self._result.set(value)
            self.producer._done(self, None)

    def failed(self, error: BaseException) -> None:
        """The producer gave up on it; ``error`` is what its caller gets. Not twice."""
        self.ended = True
        self.error = error
        if self._result is not None:
            self._result.set_exception(error)

    def set_exception(self, exception: BaseException) -> None:
        """:attr:`conn` refused it or ended before answering."""
        conn = self.conn
        if conn is not None:
            self.producer._answered_with_error(self, conn, exception)


class Deadlines:
    """Waiting for attempts, and failing the late ones; see the module docstring."""

    addresses: tuple[str, ...]
    _closed: bool
    _wheel: TimerWheel | None
    _timed: deque[Attempt]
    _deadline_timer: Timer | None
    _deadline_at: float
    _waiting: list[Attempt]
    _blocked: int
    _resuming: int
    _loop: Any

    if TYPE_CHECKING:

        def _fail(self, attempt: Attempt, error: BaseException | None) -> None: ...
        def _give_up(self, attempt: Attempt) -> None: ...

    def _wait(self, attempt: Attempt, timeout: float | None) -> None:
        """Block until ``attempt`` is answered or its deadline (plus a grace) passed.

        ``timeout`` is what the call was given (already in the attempt's deadline).
        """
        if not attempt.ended:
            timed = self._timed
            if timed and not self._closed and attempt.deadline + _GRACE >= self._deadline_at:
                # _watch's common case, inlined: the timer is armed early enough.
                while timed and timed[0].ended:
                    timed.popleft()
                timed.append(attempt)
            else:
                self._watch(attempt)
        if not attempt.ended:
            wake: Waiter[None] = Waiter()
            attempt.wake = wake
            self._blocked += 1
            try:
                wake.get()  # switched to by the hub after _done() (see _woken)
            finally:
                attempt.wake = None
                if attempt.ended:
                    self._resuming -= 1  # moved from _blocked by _done()
                else:  # the wait was cut short (a Timeout, a kill)
                    self._blocked -= 1
        if attempt.error is not None:
            raise attempt.error

    def _woken(self, attempt: Attempt) -> None:
        """``attempt`` ended (its result was just set): wake its blocked caller, if any.

        The caller runs in a later callback of the hub, after whatever is
        resolving answers now has finished (as a link on the result would,
        for less). Does not block.
        """
        wake = attempt.wake
        if wake is not None:
            attempt.wake = None
            self._blocked -= 1
            self._resuming += 1
            self._loop.run_callback(wake.switch, None)

    def _watch(self, attempt: Attempt) -> None:
        """Fail ``attempt`` if it is still unanswered ``_GRACE`` s after its deadline."""
        if self._closed or self._wheel is None:
            self._fail(attempt, ConnectionClosedError(",".join(self.addresses), "producer closed"))
            return
        timed = self._timed
        while timed and timed[0].ended:  # answered ones leave, in order
            timed.popleft()
        timed.append(attempt)
        due = attempt.deadline + _GRACE
        if due < self._deadline_at:
            self._arm_deadline(due)

    def _arm_deadline(self, due: float) -> None:
        wheel = self._wheel
        if wheel is None:  # not started: nothing waits
            return
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        self._deadline_at = due
        self._deadline_timer = wheel.call_later(
            max(0.0, due - time.monotonic()), self._check_deadlines, owner=self
        )

    def _check_deadlines(self) -> None:
        """The deadline timer fired: fail the late attempts, arm for the next."""
        self._deadline_timer = None
        self._deadline_at = math.inf
        now = time.monotonic()
        kept: deque[Attempt] = deque()
        late: list[Attempt] = []
        next_due = math.inf
        for attempt in self._timed:
            if attempt.ended:
                continue
            due = attempt.deadline + _GRACE
            if due <= now:
                late.append(attempt)
            else:
                kept.append(attempt)
                next_due = min(next_due, due)
        self._timed = kept
        for attempt in late:
            if attempt in self._waiting:
                self._waiting.remove(attempt)
                self._give_up(attempt)
            else:
                self._fail(
                    attempt, NSQTimeoutError(f"no answer from nsqd within {attempt.timeout} s")
                )
        if kept and not self._closed:
            self._arm_deadline(next_due)
