"""pynsq's ``nsq.protocol``: the byte-building helpers, constants and exceptions.

Each helper returns the bytes of one command, as ``nsq.protocol`` does; they
are thin wrappers over :mod:`gnsqlite.protocol`, so names and sizes are
checked before anything is built: an invalid topic raises
:class:`~gnsqlite.nsq.errors.ArgumentError`, which is both the
``AssertionError`` pynsq raises and gnsqlite's ``ValueError``. Durations are
pynsq's milliseconds here (``requeue(id, time_ms)``,
``dpub(topic, delay_ms, data)``). ``finish``, ``requeue`` and ``touch`` take
any id, as pynsq does (a ``str`` is encoded as UTF-8), refusing only one
with a newline, which would end the command line early. Message bodies must
be bytes, as in pynsq (the native API also takes ``str``).

The module also has pynsq's exceptions (:class:`Error`, :class:`SendError`,
:class:`ConnectionClosedError`, :class:`IntegrityError`), the command names
(``FIN``, ``REQ`` ...), ``MAGIC_V2``, ``NL`` and ``VALID_NAME_RE``.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable
from typing import Any

from .. import protocol as _p
from .errors import ConnectionClosedError, Error, IntegrityError, SendError, pynsq_arguments
from .message import Message

__all__ = [
    "AUTH",
    "DPUB",
    "FIN",
    "FRAME_TYPE_ERROR",
    "FRAME_TYPE_MESSAGE",
    "FRAME_TYPE_RESPONSE",
    "IDENTIFY",
    "MAGIC_V2",
    "MPUB",
    "NL",
    "NOP",
    "PUB",
    "RDY",
    "REQ",
    "SUB",
    "TOUCH",
    "VALID_NAME_RE",
    "ConnectionClosedError",
    "Error",
    "IntegrityError",
    "Message",
    "SendError",
    "auth",
    "decode_message",
    "dpub",
    "finish",
    "identify",
    "mpub",
    "nop",
    "pub",
    "ready",
    "requeue",
    "subscribe",
    "touch",
    "unpack_response",
    "valid_channel_name",
    "valid_topic_name",
]

FRAME_TYPE_RESPONSE = _p.FRAME_TYPE_RESPONSE
FRAME_TYPE_ERROR = _p.FRAME_TYPE_ERROR
FRAME_TYPE_MESSAGE = _p.FRAME_TYPE_MESSAGE

MAGIC_V2 = _p.MAGIC_V2
NL = b"\n"
AUTH = b"AUTH"
FIN = b"FIN"
IDENTIFY = b"IDENTIFY"
MPUB = b"MPUB"
NOP = b"NOP"
PUB = b"PUB"
RDY = b"RDY"
REQ = b"REQ"
SUB = b"SUB"
TOUCH = b"TOUCH"
DPUB = b"DPUB"
#: What a valid topic or channel name matches (it also has 1 to 64 characters).
VALID_NAME_RE = re.compile(r"^[\.a-zA-Z0-9_-]+(#ephemeral)?$")

_SIZE = struct.Struct(">l")


def identify(data: dict[str, Any]) -> bytes:
    """``IDENTIFY`` with ``data`` as its JSON body (formatted as pynsq formats it)."""
    body = json.dumps(data).encode("utf-8")
    return b"IDENTIFY\n" + _SIZE.pack(len(body)) + body


def auth(data: bytes | str) -> bytes:
    """``AUTH`` with the secret as its body."""
    return _p.auth(data)


def subscribe(topic: str, channel: str) -> bytes:
    """``SUB <topic> <channel>``."""
    with pynsq_arguments("subscribe"):
        return _p.sub(topic, channel)


def ready(count: int) -> bytes:
    """``RDY <count>``."""
    with pynsq_arguments("ready"):
        return _p.rdy(count)


def finish(id: bytes | str) -> bytes:
    """``FIN <id>``."""
    return FIN + b" " + _message_id(id) + NL


def requeue(id: bytes | str, time_ms: int = 0) -> bytes:
    """``REQ <id> <time_ms>``: redeliver after ``time_ms`` milliseconds."""
    with pynsq_arguments("requeue"):
        milliseconds = _p.to_milliseconds(_seconds(time_ms, "time_ms"), "time_ms")
    return REQ + b" " + _message_id(id) + b" " + str(milliseconds).encode() + NL


def touch(id: bytes | str) -> bytes:
    """``TOUCH <id>``."""
    return TOUCH + b" " + _message_id(id) + NL


def nop() -> bytes:
    """``NOP``."""
    return _p.nop()


def pub(topic: str, data: bytes | str) -> bytes:
    """``PUB <topic>`` with one body (bytes)."""
    with pynsq_arguments("pub"):
        return _p.pub(topic, _bytes_body(data))


def mpub(topic: str, data: Iterable[bytes | str]) -> bytes:
    """``MPUB <topic>`` with a list (or set) of bodies (bytes)."""
    with pynsq_arguments("mpub"):
        if not isinstance(data, (list, set, tuple)):
            raise TypeError(f"mpub's data must be a list of bodies, not {type(data).__name__}")
        return _p.mpub(topic, [_bytes_body(body) for body in data])


def dpub(topic: str, delay_ms: int, data: bytes | str) -> bytes:
    """``DPUB <topic> <delay_ms>``: deliver after ``delay_ms`` milliseconds."""
    with pynsq_arguments("dpub"):
        return _p.dpub(topic, _seconds(delay_ms, "delay_ms"), _bytes_body(data))


def unpack_response(data: bytes) -> tuple[int, bytes]:
    """Split a frame (without its size prefix) into ``(frame_type, data)``."""
    return _SIZE.unpack(data[:4])[0], data[4:]


def decode_message(data: bytes) -> Message:
    """The :class:`Message` in the data of a message frame (``id`` is bytes)."""
    wire = _p.decode_message(data)
    return Message(wire.id, wire.body, wire.timestamp, wire.attempts)


def valid_topic_name(topic: str) -> bool:
    """``True`` when ``topic`` is a valid topic name."""
    return _p.valid_topic_name(topic)


def valid_channel_name(channel: str) -> bool:
    """``True`` when ``channel`` is a valid channel name."""
    return _p.valid_channel_name(channel)


def _seconds(milliseconds: int | float, what: str) -> float:
    if isinstance(milliseconds, bool) or not isinstance(milliseconds, (int, float)):
        raise TypeError(f"{what} must be a number of milliseconds, not {milliseconds!r}")
    return milliseconds / 1000.0


def _bytes_body(body: Any) -> bytes:
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise TypeError(
            f"a message body must be bytes, not {type(body).__name__} (encode a str first)"
        )
    return bytes(body)


def _message_id(id: bytes | str) -> bytes:
    """A message id as the bytes of a command line: any length, ``str`` as UTF-8."""
    if isinstance(id, str):
        raw = id.encode("utf-8")
    elif isinstance(id, (bytes, bytearray, memoryview)):
        raw = bytes(id)
    else:
        raise TypeError(f"a message id must be bytes or str, not {type(id).__name__}")
    if b"\n" in raw:
        raise ValueError(
            f"a message id cannot hold a newline, which ends the command: {id!r}"
            " (nsqd's ids are 16 hex characters, message.id)"
        )
    return raw
