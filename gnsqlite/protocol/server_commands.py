"""The commands a client sends, as the server side parses them (small frozen values).

:class:`~gnsqlite.protocol.server.CommandParser` returns one of these per
command; the embedded broker acts on them. Also the client states nsqd
numbers (``/stats`` shows them). Pure: no I/O.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "STATE_INIT",
    "STATE_SUBSCRIBED",
    "STATE_CLOSING",
    "Identify",
    "Auth",
    "Sub",
    "Pub",
    "MpubStart",
    "Mpub",
    "Dpub",
    "Rdy",
    "Fin",
    "Req",
    "Touch",
    "Cls",
    "Nop",
    "Command",
]

#: Client states, numbered as nsqd numbers them (``/stats`` shows them).
STATE_INIT = 0
STATE_SUBSCRIBED = 3
STATE_CLOSING = 4


class Identify(NamedTuple):
    """``IDENTIFY`` with its raw JSON body."""

    body: bytes


class Auth(NamedTuple):
    """``AUTH`` with the secret."""

    secret: bytes


class Sub(NamedTuple):
    """``SUB <topic> <channel>``."""

    topic: str
    channel: str


class Pub(NamedTuple):
    """``PUB <topic>`` with one body."""

    topic: str
    body: bytes


class MpubStart(NamedTuple):
    """The line of ``MPUB <topic>`` was read; nsqd checks AUTH before the body."""

    topic: str


class Mpub(NamedTuple):
    """``MPUB <topic>`` with its message bodies."""

    topic: str
    bodies: list[bytes]


class Dpub(NamedTuple):
    """``DPUB <topic> <defer_ms>`` with one body."""

    topic: str
    delay_ms: int
    body: bytes


class Rdy(NamedTuple):
    """``RDY <count>``: how many messages may be in flight to this client."""

    ready_count: int


class Fin(NamedTuple):
    """``FIN <id>``."""

    message_id: bytes


class Req(NamedTuple):
    """``REQ <id> <timeout_ms>``; ``delay_ms`` is already clamped like nsqd."""

    message_id: bytes
    delay_ms: int


class Touch(NamedTuple):
    """``TOUCH <id>``."""

    message_id: bytes


class Cls(NamedTuple):
    """``CLS``: start closing."""


class Nop(NamedTuple):
    """``NOP`` (also what an ignored ``RDY`` after ``CLS`` becomes)."""


Command = (
    Identify | Auth | Sub | Pub | MpubStart | Mpub | Dpub | Rdy | Fin | Req | Touch | Cls | Nop
)
