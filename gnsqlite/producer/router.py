"""The route of a producer's publishes: send, retry elsewhere, wait for a reconnect, give up.

:class:`Router` starts each publish as an :class:`~.attempt.Attempt` and
sends it on the pool's next healthy connection (pipelined: the connection
matches nsqd's answers to requests in order). It is the
:class:`~.attempt.AttemptRoute` the attempts report to: an attempt refused
with a retryable error, or whose connection died before the answer, is sent
again on a connection it has not tried, within its deadline; one with no
connection left to try is parked until a connection comes up, with a timer
that gives it up at its deadline. Its :class:`~.deadlines.Deadlines` blocks
the callers that wait. Every end of a publish is counted in the producer's
:class:`~.stats.PublishStats`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

from ..errors import (
    ConnectionClosedError,
    DPubFailedError,
    LocalProtocolError,
    MPubFailedError,
    NoConnectionsError,
    NSQConnectionError,
    NSQTimeoutError,
    PubFailedError,
)
from ..timers import TimerWheel
from .attempt import Attempt, AttemptRouteBase, PublishConnection
from .deadlines import Deadlines
from .pool import Pool
from .stats import PublishStats

__all__ = ["Router"]

log = logging.getLogger(__name__)

#: Bound once (a C global in the compiled build): read on every publish.
_monotonic: Final = time.monotonic

_RETRYABLE = (NSQConnectionError, PubFailedError, MPubFailedError, DPubFailedError)
#: The command names stats() counts publishes under: the wire's, in lower case.
_COUNTED_AS: Final = {command: command.lower() for command in ("PUB", "MPUB", "DPUB")}


class Router(AttemptRouteBase):
    """Where a producer's attempts go; see the module docstring.

    ``timeout`` (seconds) is the deadline of a publish given none. Timers
    are owned by ``owner`` (the producer, which cancels them when it
    closes). ``nothing_known()`` says why the pool has no nsqd at all (a
    producer that finds them through lookupd), for the error of a publish
    given up then. The constructor opens nothing and starts nothing.
    """

    def __init__(
        self,
        pool: Pool,
        stats: PublishStats,
        timeout: float,
        owner: object,
        nothing_known: Callable[[], NoConnectionsError] | None = None,
    ) -> None:
        self._pool = pool
        self._nothing_known = nothing_known
        self._stats = stats
        self._timeout = timeout
        self._owner = owner
        #: The callers' deadlines; hands the late attempts to :meth:`late`.
        self.deadlines = Deadlines(self.late, owner)
        self._waiting: list[Attempt] = []  # parked until a connection comes up
        self._next = 0  # the index in the pool's healthy list of the last one used
        self._wheel: TimerWheel | None = None
        self._closed = False

    def start(self, wheel: TimerWheel) -> None:
        """Accept publishes; parking timers go on ``wheel``."""
        self._wheel = wheel

    def close(self) -> None:
        """Fail the parked attempts with ConnectionClosedError; refuse new ones. Does not block."""
        self._closed = True
        self.deadlines.close()
        waiting, self._waiting = self._waiting, []
        for attempt in waiting:
            self.fail(attempt, self._closed_error("producer closed"))

    def _closed_error(self, why: str) -> ConnectionClosedError:
        return ConnectionClosedError(",".join(self._pool.addresses) or "producer", why)

    def submit(
        self,
        command: str,
        data: bytes,
        topic: str,
        messages: int,
        timeout: float | None,
        blocking: bool,
    ) -> Attempt:
        """Start one publish of ``data`` (a whole ``command``, ``messages`` in it); does not block.

        ``timeout`` (seconds, ``None``: the producer's) bounds it, retries
        included. ``blocking``: its caller waits for it next, in
        :meth:`Deadlines.wait <.deadlines.Deadlines.wait>`. Such a publish
        goes out at once when no other caller is blocked here or just woken:
        nsqd works on it while the caller sets up its wait. When other
        callers block here (many greenlets publishing through one producer),
        their publishes come in batches, each woken by one batch of answers:
        this one leaves its send to the hub's flush, which sends the batch
        together. Sending each at once would split the batches, and once
        split they stay split.
        """
        if self._closed:
            raise self._closed_error("the producer is closed")
        if self._wheel is None:
            raise self._closed_error("the producer is not started: call start() first")
        timeout = self._timeout if timeout is None else timeout
        attempt = Attempt(self, command, data, _monotonic() + timeout, timeout, topic, messages)
        self._stats.in_flight += 1
        deadlines = self.deadlines
        self.dispatch(attempt, blocking and not deadlines.blocked and not deadlines.resuming)
        return attempt

    def dispatch(self, attempt: Attempt, now: bool = False) -> None:
        """Send ``attempt`` on the pool's next healthy connection (in turn) it has not tried.

        ``now``: at once, rather than with the hub's flush. With none left
        to try, it is parked until a connection comes up or its deadline.
        """
        if attempt.ended:
            return
        # A list, and each one a Connection or else a PublishConnection: the compiled
        # build indexes it in place and calls a Connection directly.
        healthy = self._pool.healthy
        tried = attempt.tried
        last = attempt.conn
        if last is not None:  # sent before: skip every connection tried (most go out once)
            if tried is None:
                tried = attempt.tried = set()
            tried.add(last)
        count = len(healthy)
        for _ in range(count):  # the next one in turn not tried yet
            self._next = (self._next + 1) % count
            conn = healthy[self._next]
            if tried is None or conn not in tried:
                break
        else:
            self._park(attempt)
            return
        attempt.conn = conn
        try:
            conn.request_encoded(attempt, attempt.command, attempt.data, now)
        except (NSQConnectionError, LocalProtocolError) as exc:  # the connection just ended
            attempt.refused(conn, exc)
            self.dispatch(attempt, now)

    def connected(self) -> None:
        """A connection came up: send the parked attempts. Does not block."""
        waiting, self._waiting = self._waiting, []
        for attempt in waiting:
            if attempt.expiry is not None:
                # Let go of it now, not at its deadline: the timer holds the
                # attempt, its request and the connections it tried.
                attempt.expiry.cancel()
                attempt.expiry = None
            self.dispatch(attempt)

    # -- AttemptRoute ------------------------------------------------------

    def done(self, attempt: Attempt, error: BaseException | None) -> None:
        """Count the end of one publish (it has just ended) and wake its caller."""
        stats = self._stats
        stats.in_flight -= 1
        if attempt.wake is not None:  # its caller runs soon
            self.deadlines.woken(attempt)
        started = attempt.deadline - attempt.timeout  # the time.monotonic() of the call
        stats.count(attempt.topic, _COUNTED_AS[attempt.command], attempt.messages, started, error)

    def answered_with_error(
        self, attempt: Attempt, conn: PublishConnection, error: BaseException
    ) -> None:
        """Retry on another connection when that may help; runs in a reader greenlet."""
        if attempt.ended:
            return
        retry = not self._closed and _monotonic() < attempt.deadline
        if isinstance(error, _RETRYABLE) and retry:
            attempt.refused(conn, error)
            log.info("producer: retrying a publish after %s", error)
            self.dispatch(attempt)
        else:
            self.fail(attempt, error)

    # -- ending ------------------------------------------------------------

    def late(self, attempt: Attempt) -> None:
        """Its caller stops waiting for ``attempt``: end it with the error that says why.

        Parked: :class:`~gnsqlite.errors.NoConnectionsError`; the producer
        closed: :class:`~gnsqlite.errors.ConnectionClosedError`; else sent
        and not answered: :class:`~gnsqlite.errors.NSQTimeoutError`.
        """
        if attempt in self._waiting:
            self._waiting.remove(attempt)
            self._give_up(attempt)
        elif self._closed or self._wheel is None:
            self.fail(attempt, self._closed_error("producer closed"))
        else:
            self.fail(attempt, NSQTimeoutError(f"no answer from nsqd within {attempt.timeout} s"))

    def fail(self, attempt: Attempt, error: BaseException) -> None:
        """End ``attempt`` with ``error`` (unless it has ended) and count it."""
        if not attempt.ended:
            attempt.failed(error)
            self.done(attempt, error)

    def _park(self, attempt: Attempt) -> None:
        """No connection to try now: wait for a reconnect until the deadline."""
        remaining = attempt.deadline - _monotonic()
        if remaining <= 0 or self._closed or self._wheel is None:
            self._give_up(attempt)
            return
        self._waiting.append(attempt)
        attempt.expiry = self._wheel.call_later(remaining, self._expire, attempt, owner=self._owner)

    def _expire(self, attempt: Attempt) -> None:
        if attempt in self._waiting:
            self._waiting.remove(attempt)
            self._give_up(attempt)

    def _give_up(self, attempt: Attempt) -> None:
        errors = dict(attempt.errors or {})
        last_error = self._pool.last_error
        addresses = self._pool.addresses
        for address in addresses:
            if address not in errors and address in last_error:
                errors[address] = last_error[address]
        if not errors and not addresses and self._nothing_known is not None:
            self.fail(attempt, self._nothing_known())
            return
        self.fail(attempt, NoConnectionsError(errors, "every nsqd failed or is unreachable"))
