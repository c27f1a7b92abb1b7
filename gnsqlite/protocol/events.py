"""What the client state machine reports after reading bytes from nsqd.

Each event is a small frozen dataclass. ``Response`` and ``ErrorReceived``
carry ``command``: the name of the request they answer (``"PUB"``, ``"SUB"``
...) or ``None`` when they answer none (a non-fatal ``E_FIN_FAILED``, say).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ServerError
from .frames import MessageFields, WireMessage

__all__ = [
    "Event",
    "Identified",
    "Upgraded",
    "Authenticated",
    "Response",
    "ErrorReceived",
    "MessageReceived",
    "Delivery",
    "Heartbeat",
    "CloseWait",
]


class Event:
    """Base class of every event."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Identified(Event):
    """nsqd answered IDENTIFY.

    ``features`` is the negotiated JSON reply (or defaults, such as
    ``max_rdy_count`` 2500, when nsqd answered a plain ``OK``);
    ``upgrades`` lists what must happen next, in order: ``"tls"``,
    ``"snappy"``, ``"deflate"``.
    """

    features: dict[str, Any]
    upgrades: tuple[str, ...]
    negotiated: bool


@dataclass(frozen=True, slots=True)
class Upgraded(Event):
    """nsqd sent the ``OK`` that confirms an upgrade (``"tls"``, ``"snappy"``, ``"deflate"``)."""

    kind: str


@dataclass(frozen=True, slots=True)
class Authenticated(Event):
    """nsqd accepted AUTH; ``identity`` is its JSON reply."""

    identity: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Response(Event):
    """A response frame that answers ``command`` (usually ``b"OK"``).

    ``waiter`` is what :meth:`ClientConnection.await_answer` attached to
    that request (``None``: the caller waits for nothing).
    """

    data: bytes
    command: str
    waiter: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class ErrorReceived(Event):
    """An error frame; ``command`` is the request it answers, if any, and
    ``waiter`` what was attached to that request (see :class:`Response`)."""

    error: ServerError
    command: str | None
    waiter: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class MessageReceived(Event):
    """A message pushed by nsqd."""

    message: WireMessage


class Delivery(Event, MessageFields):
    """A message pushed by nsqd, reported as itself rather than in a :class:`MessageReceived`.

    A :class:`~.client.ClientConnection` built with ``message_class`` (a
    subclass of this, or of :class:`~.frames.MessageFields`) reports each
    message as an instance of that class, made without ``__init__`` with
    the four fields of :class:`~.frames.MessageFields` set: the receiver's
    own message object is then the only object per message.
    """

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Heartbeat(Event):
    """nsqd sent ``_heartbeat_``; a ``NOP`` is already queued in the outbox."""


@dataclass(frozen=True, slots=True)
class CloseWait(Event):
    """nsqd answered CLS with ``CLOSE_WAIT``: no more messages will come."""
