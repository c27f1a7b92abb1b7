"""A publish on its way, and the interface it reports to.

An :class:`Attempt` is one publish call travelling over a producer's
connections until nsqd accepts it or it gives up; it is the
:class:`~gnsqlite.connection.AnswerWaiter` the connection's reader answers directly.
It knows nothing of the producer: it reports to an :class:`AttemptRoute`
(the producer's :class:`~gnsqlite.producer.router.Router`), whose two
public methods are all it calls. Nothing here blocks.
"""

from __future__ import annotations

from typing import Protocol

import gevent.event
from gevent.hub import Waiter

from .._mypyc import mypyc_attr
from ..timers import Timer

__all__ = ["Attempt", "AttemptRoute", "AttemptRouteBase", "PublishConnection"]


class PublishConnection(Protocol):
    """What a producer's attempts, route and counters use of a connection.

    A :class:`~gnsqlite.connection.Connection`; named by what is used, so
    the producer's objects take fakes in tests, compiled or not (the
    compiled build checks a declared class at every assignment).
    """

    name: str
    #: The ``time.monotonic()`` of the last bytes read (heartbeats included).
    last_received: float

    def request_encoded(
        self, waiter: Attempt, command: str, data: bytes, now: bool = False
    ) -> None:
        """Queue a publish built once (see ``Connection.request_encoded``); does not block."""


class AttemptRoute(Protocol):
    """What an attempt reports to; both calls run where nsqd's answer was read."""

    def done(self, attempt: Attempt, error: BaseException | None) -> None:
        """``attempt`` has just ended: answered OK (``error`` ``None``) or failed for good."""
        ...

    def answered_with_error(
        self, attempt: Attempt, conn: PublishConnection, error: BaseException
    ) -> None:
        """``conn`` refused ``attempt`` or closed before answering it; it may be retried."""
        ...


@mypyc_attr(allow_interpreted_subclasses=True)  # the compiled build: a test may subclass it
class AttemptRouteBase:
    """An :class:`AttemptRoute` as a base class: the producer's router is one.

    An attempt calls a subclass's methods directly in the compiled build (a C
    call through the class's method table); any other :class:`AttemptRoute`
    (a test's recording fake) through Python's calling convention.
    """

    __slots__ = ()

    def done(self, attempt: Attempt, error: BaseException | None) -> None:
        """``attempt`` has just ended: answered OK (``error`` ``None``) or failed for good."""
        raise NotImplementedError

    def answered_with_error(
        self, attempt: Attempt, conn: PublishConnection, error: BaseException
    ) -> None:
        """``conn`` refused ``attempt`` or closed before answering it; it may be retried."""
        raise NotImplementedError


class Attempt:
    """One publish call travelling over connections until it succeeds or gives up.

    It is also the :class:`~gnsqlite.connection.AnswerWaiter` of the connection it was
    last sent on (one at a time: it moves on only after that one failed),
    which the connection's reader calls directly.
    """

    __slots__ = (
        "_result",
        "command",
        "conn",
        "data",
        "deadline",
        "ended",
        "error",
        "errors",
        "expiry",
        "messages",
        "route",
        "timeout",
        "topic",
        "tried",
        "value",
        "wake",
    )

    def __init__(
        self,
        route: AttemptRouteBase | AttemptRoute,
        command: str,
        data: bytes,
        deadline: float,
        timeout: float,
        topic: str,
        messages: int,
    ) -> None:
        self.route = route
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
        #: Why each connection tried refused it (made at the first refusal).
        self.errors: dict[str, BaseException] | None = None
        #: The connections tried before :attr:`conn` (made when it is sent again).
        self.tried: set[PublishConnection] | None = None
        self.conn: PublishConnection | None = None  # where it was sent last
        #: While a caller blocks in :meth:`Deadlines.wait` for it: what wakes that
        #: caller (cheaper than a link on the result, which publish_async callers use).
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
            self.route.done(self, None)

    def failed(self, error: BaseException) -> None:
        """The route gave up on it; ``error`` is what its caller gets. Not twice."""
        self.ended = True
        self.error = error
        if self._result is not None:
            self._result.set_exception(error)

    def refused(self, conn: PublishConnection, error: BaseException) -> None:
        """Record why ``conn`` did not take it (the error of its caller if none does)."""
        errors = self.errors
        if errors is None:
            errors = self.errors = {}
        errors[conn.name] = error

    def set_exception(self, exception: BaseException) -> None:
        """:attr:`conn` refused it or ended before answering."""
        conn = self.conn
        if conn is not None:
            self.route.answered_with_error(self, conn, exception)
