"""The message a Consumer's handler receives, and how a handler answers it.

A handler that returns normally finishes its message; one that raises
requeues it with backoff; one that raises :class:`RequeueMessage` requeues it
as asked. A handler may instead call :meth:`Message.enable_async` and answer
later, from any greenlet, with :meth:`Message.finish` or
:meth:`Message.requeue`. Answering twice is harmless: the second call does
nothing and returns ``False``; so does an answer after the message's
connection ended (nothing can be sent; nsqd redelivers the message).

While a Consumer's handler function runs (and while a batch handler's
batcher holds a message) the consumer TOUCHes the message before
:meth:`Message.time_left` runs out, up to its ``max_lease``
(:mod:`gnsqlite.consumer.lease`); an async message's owner calls
:meth:`Message.touch` itself.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Protocol

from ._mypyc import mypyc_attr
from .connection import Connection
from .connection.reader import MessageSink
from .protocol import MessageFields

__all__ = [
    "Message",
    "RequeueMessage",
    "Responder",
    "ResponderBase",
    "connection_gone",
    "deliver",
    "finish_all",
]


def connection_gone(connection: Any) -> bool:
    """Whether a message's ``connection`` has ended, so no answer can reach nsqd.

    The one statement of the rule (:attr:`Message.connection_lost`, the
    answers, the settler and :func:`finish_all` ask it). A message built
    without a connection (``None``, or an object with no ``closed``) has
    not lost it.
    """
    try:
        return bool(connection.closed)
    except AttributeError:
        return False


class Responder(Protocol):
    """What a :class:`Message` reports its answer to (the Consumer): one method per answer."""

    def on_finish(self, message: Message) -> None:
        """Send FIN for ``message``."""
        ...

    def on_requeue(self, message: Message, delay: float | None, backoff: bool) -> None:
        """Send REQ for ``message``, delivered again after ``delay`` seconds."""
        ...

    def on_touch(self, message: Message) -> None:
        """Send TOUCH for ``message``."""
        ...


@mypyc_attr(allow_interpreted_subclasses=True)  # the compiled build: a test may subclass it
class ResponderBase(MessageSink):
    """A :class:`Responder` as a base class: the Consumer's links are ones.

    A message calls a subclass's methods directly in the compiled build (a C
    call through the class's method table); any other :class:`Responder`
    through Python's calling convention, as before. A
    :class:`~gnsqlite.connection.reader.MessageSink` too: the connection
    calls a link's ``on_message`` directly as well.
    """

    __slots__ = ()

    def on_finish(self, message: Message) -> None:
        """Send FIN for ``message``."""
        raise NotImplementedError

    def on_requeue(self, message: Message, delay: float | None, backoff: bool) -> None:
        """Send REQ for ``message``, delivered again after ``delay`` seconds."""
        raise NotImplementedError

    def on_touch(self, message: Message) -> None:
        """Send TOUCH for ``message``."""
        raise NotImplementedError


class _SingleMethodResponder:
    """Adapts an older responder with one ``respond(message, action, delay, backoff)``."""

    __slots__ = ("respond",)

    def __init__(self, respond: Any) -> None:
        self.respond = respond

    def on_finish(self, message: Message) -> None:
        self.respond(message, "finish", None, False)

    def on_requeue(self, message: Message, delay: float | None, backoff: bool) -> None:
        self.respond(message, "requeue", delay, backoff)

    def on_touch(self, message: Message) -> None:
        self.respond(message, "touch", None, False)


class RequeueMessage(Exception):
    """Raise from a handler to requeue the message as asked.

    ``delay`` in seconds (``None``: the consumer's requeue policy),
    ``backoff`` whether the failure counts toward the consumer's backoff.
    """

    def __init__(self, delay: float | None = None, backoff: bool = False) -> None:
        super().__init__(f"requeue (delay={delay}, backoff={backoff})")
        self.delay = delay
        self.backoff = backoff


@mypyc_attr(allow_interpreted_subclasses=True)  # the compiled build: users may subclass it
class Message(MessageFields):
    """A message delivered to a Consumer.

    ``id`` is the 16-character message id, ``body`` the bytes published,
    ``timestamp`` nanoseconds since the epoch when nsqd received it,
    ``attempts`` the delivery count (this one included), ``nsqd`` the
    ``"host:port"`` of the nsqd that sent it, ``connection`` the consumer's
    connection object it came on, ``msg_timeout`` nsqd's timeout for it in
    seconds.

    The Consumer's connections decode message frames straight into this
    class (a :class:`~gnsqlite.protocol.MessageFields`: ``wire_id``,
    ``body``, ``timestamp`` and ``attempts`` are set by the frame decoder)
    and :func:`deliver` fills in the rest: one object per message.
    """

    __slots__ = (
        "_async",
        "_deadline",
        "_responded",
        "_responder",
        "connection",
        "msg_timeout",
        "nsqd",
    )

    nsqd: str
    msg_timeout: float
    # A Connection or anything else (a test's fake, None): the compiled build reads a
    # Connection's ``closed`` directly, after a test of its class (subclasses too).
    connection: Connection | Any
    _responder: ResponderBase | Responder
    _responded: bool
    _async: bool
    _deadline: float

    def __init__(
        self,
        id: str | bytes,
        body: bytes,
        timestamp: int,
        attempts: int,
        nsqd: str,
        responder: Responder,
        msg_timeout: float,
        connection: Connection | Any = None,
    ) -> None:
        # The 16 bytes FIN/REQ/TOUCH carry; ``id`` decodes them on demand.
        if type(id) is not bytes:
            id = id.encode("ascii") if isinstance(id, str) else bytes(id)
        self.wire_id = id
        self.body = body
        self.timestamp = timestamp
        self.attempts = attempts
        self.nsqd = nsqd
        self.msg_timeout = msg_timeout
        self.connection = connection
        if not hasattr(responder, "on_finish") and hasattr(responder, "respond"):
            responder = _SingleMethodResponder(responder.respond)
        self._responder = responder
        self._responded = False
        self._async = False
        self._deadline = time.monotonic() + msg_timeout

    @property
    def id(self) -> str:
        """The 16-character message id."""
        return self.wire_id.decode("ascii")

    def __repr__(self) -> str:
        return f"<Message {self.id} attempts={self.attempts} from {self.nsqd}>"

    @property
    def has_responded(self) -> bool:
        """True once the message was finished or requeued."""
        return self._responded

    @property
    def is_async(self) -> bool:
        """True when the handler took over answering this message."""
        return self._async

    def enable_async(self) -> None:
        """Take over answering: the consumer will not answer when the handler returns."""
        self._async = True

    def time_left(self) -> float:
        """Seconds before nsqd times the message out (from the last delivery or touch)."""
        return max(0.0, self._deadline - time.monotonic())

    @property
    def connection_lost(self) -> bool:
        """True when the connection it came on has ended: no answer can reach nsqd.

        nsqd redelivers such a message after its timeout (or at once, when it
        noticed the connection end), so the work may be done twice.
        """
        return connection_gone(self.connection)

    def finish(self) -> bool:
        """FIN: the message was handled. Does not block.

        Returns ``True`` when FIN was handed to the connection, ``False`` if
        the message was already answered or its connection has ended
        (:attr:`connection_lost`; nsqd redelivers it).
        """
        if self._responded:
            return False
        self._responded = True
        try:  # connection_gone(self.connection), copied for the per-message path
            lost = self.connection.closed  # (tests/unit/test_rule_copies.py checks they agree)
        except AttributeError:
            lost = False
        if lost:
            return False
        self._responder.on_finish(self)
        return True

    def requeue(self, delay: float | None = None, backoff: bool = True) -> bool:
        """REQ: deliver again after ``delay`` seconds (``None``: the consumer's policy).

        ``backoff`` tells whether this failure slows the consumer down.
        Returns ``False`` if the message was already answered or its
        connection has ended (nsqd redelivers it anyway). Does not block.
        """
        if self._responded:
            return False
        self._responded = True
        if connection_gone(self.connection):
            return False
        self._responder.on_requeue(self, delay, backoff)
        return True

    def touch(self) -> bool:
        """TOUCH: reset nsqd's timeout for this message. Does not block.

        ``False`` if already answered or its connection has ended. nsqd
        extends a message at most to its ``max_msg_timeout`` in all.
        """
        if self._responded or connection_gone(self.connection):
            return False
        self._deadline = time.monotonic() + self.msg_timeout
        self._responder.on_touch(self)
        return True


def deliver(
    message: Message,
    nsqd: str,
    responder: ResponderBase | Responder,
    msg_timeout: float,
    connection: Connection | Any,
    now: float,
) -> None:
    """Make ``message``, as the frame decoder built it, one delivered to a Consumer (the hot path).

    The decoder set ``wire_id``, ``body``, ``timestamp`` and ``attempts``
    (see :class:`~gnsqlite.protocol.Delivery`); this sets the rest as the
    constructor would, without its conversions: ``responder`` must have the
    ``on_*`` methods. ``now`` is ``time.monotonic()`` at delivery, in seconds.
    """
    message.nsqd = nsqd
    message.msg_timeout = msg_timeout
    message.connection = connection
    message._responder = responder
    message._responded = False
    message._async = False
    message._deadline = now + msg_timeout


_NO_CONNECTION = object()


def finish_all(messages: Iterable[Message]) -> int:
    """FIN every one of ``messages`` not yet answered, as :meth:`Message.finish` would.

    A responder with an ``on_finish_many(messages)`` method (the Consumer's
    :class:`~gnsqlite.consumer.link.Link`) gets its messages in one call,
    so the FINs of one connection go out in one write; others get
    ``on_finish`` per message. Messages already answered, or whose
    connection ended, are skipped. Returns how many FINs were handed over.
    Does not block.
    """
    groups: dict[int, tuple[Any, list[Message]]] = {}
    last: Any = None
    batch: list[Message] = []
    count = 0
    connection: Any = _NO_CONNECTION
    lost = False
    for message in messages:
        if message._responded:
            continue
        message._responded = True
        if message.connection is not connection:  # asked once per connection
            connection = message.connection
            lost = connection_gone(connection)
        if lost:
            continue
        responder = message._responder
        if responder is not last:
            last = responder
            batch = groups.setdefault(id(responder), (responder, []))[1]
        batch.append(message)
        count += 1
    for responder, group in groups.values():
        many = getattr(responder, "on_finish_many", None)
        if many is not None:
            many(group)
        else:
            for message in group:
                responder.on_finish(message)
    return count
