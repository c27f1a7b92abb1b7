"""Every command of the NSQ TCP protocol V2, as functions that return bytes.

The functions validate their arguments before building anything, so an invalid
name or size raises and nothing reaches the wire. Durations are float seconds
and are rounded to whole milliseconds, the unit nsqd reads.

>>> pub("clicks", b"hi")
b'PUB clicks\\n\\x00\\x00\\x00\\x02hi'
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from ..errors import LocalProtocolError
from .names import check_channel_name, check_topic_name
from .publishing import pub_bytes

__all__ = [
    "MAGIC_V2",
    "MESSAGE_ID_LENGTH",
    "identify",
    "auth",
    "sub",
    "pub",
    "mpub",
    "mpub_body",
    "mpub_command",
    "mpub_body_size",
    "dpub",
    "rdy",
    "fin",
    "fin_many",
    "req",
    "touch",
    "cls",
    "nop",
    "to_milliseconds",
    "check_message_id",
    "as_body",
]

#: The four bytes a client sends first to choose protocol V2.
MAGIC_V2 = b"  V2"
#: Message ids are 16 ASCII hex characters.
MESSAGE_ID_LENGTH: Final = 16

_SIZE = struct.Struct(">I")
_NOP = b"NOP\n"
_CLS = b"CLS\n"


def to_milliseconds(seconds: float, what: str) -> int:
    """Convert a non-negative duration in float seconds to whole milliseconds."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise LocalProtocolError(f"{what} must be a number of seconds, not {seconds!r}")
    if seconds != seconds or seconds < 0:
        raise LocalProtocolError(f"{what} must be 0 or more seconds, not {seconds!r}")
    return round(seconds * 1000)


#: What a message body may be given as; ``str`` is sent as UTF-8.
Body = bytes | bytearray | memoryview | str


def as_body(body: Body) -> bytes:
    """Return a message body as bytes; ``str`` is encoded as UTF-8.

    Raises ``TypeError`` for anything else, naming the type received.
    """
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, (bytearray, memoryview)):
        return bytes(body)
    raise TypeError(f"a message body must be bytes or str, not {type(body).__name__}")


def check_message_id(message_id: bytes | str) -> bytes:
    """Return the 16-byte wire form of a message id, or raise."""
    raw = message_id.encode("ascii") if isinstance(message_id, str) else bytes(message_id)
    if len(raw) != MESSAGE_ID_LENGTH:
        raise LocalProtocolError(
            f"a message id has {MESSAGE_ID_LENGTH} bytes, not {len(raw)}: {message_id!r}"
        )
    return raw


def _with_body(line: bytes, body: bytes) -> bytes:
    return b"".join((line, _SIZE.pack(len(body)), body))


def identify(data: Mapping[str, Any]) -> bytes:
    """``IDENTIFY``: the metadata and features as a size-prefixed JSON body."""
    body = json.dumps(dict(data), separators=(",", ":"), sort_keys=True).encode("utf-8")
    return _with_body(b"IDENTIFY\n", body)


def auth(secret: bytes | str) -> bytes:
    """``AUTH``: the secret as a size-prefixed body."""
    return _with_body(b"AUTH\n", as_body(secret))


def sub(topic: str, channel: str) -> bytes:
    """``SUB <topic> <channel>``."""
    t = check_topic_name(topic)
    c = check_channel_name(channel)
    return f"SUB {t} {c}\n".encode("ascii")


def pub(topic: str, body: Body) -> bytes:
    """``PUB <topic>`` with one size-prefixed message body."""
    t = check_topic_name(topic)
    return pub_bytes(t, body if type(body) is bytes else as_body(body))


def mpub(topic: str, bodies: Iterable[Body]) -> bytes:
    """``MPUB <topic>``: body size, message count, then each size and body.

    The body size counts the 4-byte message count and every size prefix.
    An empty batch raises: nsqd refuses it.
    """
    t = check_topic_name(topic)
    raws = [body if type(body) is bytes else as_body(body) for body in bodies]
    return mpub_command(t, raws)


def mpub_command(topic: str, bodies: Sequence[bytes], size: int | None = None) -> bytes:
    """The whole ``MPUB <topic>`` of ``bodies``, built in one join (each body copied once).

    ``bodies`` must be ``bytes`` already (see :func:`as_body`); their sizes
    are not checked here. ``size``, when given, is the size of every body
    (the caller found them all equal): the prefixes are then one repeated
    separator. An empty batch raises: nsqd refuses it.
    """
    t = check_topic_name(topic)
    count = len(bodies)
    if not count:
        raise LocalProtocolError("MPUB needs at least one message")
    total = mpub_body_size(bodies, size)
    return _mpub_join(b"MPUB %s\n%s" % (t.encode("ascii"), _SIZE.pack(total)), bodies, size)


def mpub_body_size(bodies: Sequence[bytes], size: int | None = None) -> int:
    """The bytes of the MPUB body of ``bodies``: the count, each body's size prefix and bytes.

    ``size``, when given, is the size of every body (the caller found them all equal).
    """
    count = len(bodies)
    return 4 + count * (4 + size) if size is not None else 4 + 4 * count + sum(map(len, bodies))


def mpub_body(bodies: Sequence[bytes], size: int | None = None) -> bytes:
    """The body of an MPUB: the 4-byte message count, then each body's 4-byte size and bytes.

    ``bodies`` must be ``bytes`` already (see :func:`as_body`); their sizes
    are not checked here. ``size``, when given, is the size of every body (the
    caller found them all equal): the prefixes are then one repeated
    separator, and the body is built in one join.
    """
    return _mpub_join(b"", bodies, size)


def _mpub_join(head: bytes, bodies: Sequence[bytes], size: int | None) -> bytes:
    """``head``, then the MPUB body of ``bodies`` (see :func:`mpub_body`), in one join."""
    count = len(bodies)
    head += _SIZE.pack(count)
    if size is not None and count:
        # The size prefix is the separator: [head, b1, b2 ...] joined by it.
        return _SIZE.pack(size).join([head, *bodies])
    parts: list[bytes] = [b""] * (2 * count + 1)
    parts[0] = head
    parts[1::2] = map(_SIZE.pack, map(len, bodies))
    parts[2::2] = bodies
    return b"".join(parts)


def mpub_encoded(topic: str, payload: bytes | memoryview) -> bytes:
    """``MPUB <topic>`` with a ready body: the 4-byte message count, then each size and body.

    For callers that build the body from columnar data without a bytes
    object per message; the body is sent as given (only its size framed).
    """
    t = check_topic_name(topic)
    if len(payload) < 8:
        raise LocalProtocolError("MPUB needs at least one message")
    return b"".join((f"MPUB {t}\n".encode("ascii"), _SIZE.pack(len(payload)), payload))


def dpub(topic: str, delay: float, body: Body) -> bytes:
    """``DPUB <topic> <defer_ms>``: publish ``body`` after ``delay`` seconds."""
    t = check_topic_name(topic)
    ms = to_milliseconds(delay, "the DPUB delay")
    return _with_body(f"DPUB {t} {ms}\n".encode("ascii"), as_body(body))


def rdy(count: int) -> bytes:
    """``RDY <count>``: how many more messages the client can take."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise LocalProtocolError(f"RDY count must be an int of 0 or more, not {count!r}")
    return b"RDY %d\n" % count


def fin(message_id: bytes | str) -> bytes:
    """``FIN <id>``: the message was handled."""
    if type(message_id) is bytes and len(message_id) == MESSAGE_ID_LENGTH:
        return b"FIN %s\n" % message_id  # the consumer's case, checked in one step
    return b"FIN " + check_message_id(message_id) + b"\n"


def fin_many(message_ids: Sequence[bytes | str]) -> bytes:
    """``FIN <id>`` for each of ``message_ids``, concatenated: many answers for one write.

    Every id is checked as by :func:`fin`; the consumer's case (16-byte
    ``bytes`` ids) is checked and joined without a Python step per id.
    """
    if not message_ids:
        return b""
    if set(map(type, message_ids)) == {bytes} and set(map(len, message_ids)) == {MESSAGE_ID_LENGTH}:
        return b"FIN " + b"\nFIN ".join(message_ids) + b"\n"  # type: ignore[arg-type]
    return b"".join(map(fin, message_ids))


def req(message_id: bytes | str, delay: float = 0.0) -> bytes:
    """``REQ <id> <timeout_ms>``: requeue the message after ``delay`` seconds."""
    ms = to_milliseconds(delay, "the REQ delay")
    return b"REQ %s %d\n" % (check_message_id(message_id), ms)


def touch(message_id: bytes | str) -> bytes:
    """``TOUCH <id>``: reset the message's timeout at nsqd."""
    return b"TOUCH " + check_message_id(message_id) + b"\n"


def cls() -> bytes:
    """``CLS``: ask nsqd to stop sending messages and answer ``CLOSE_WAIT``."""
    return _CLS


def nop() -> bytes:
    """``NOP``: no operation; the answer to a heartbeat."""
    return _NOP
