"""pynsq's byte-building helpers, with pynsq's signatures and units.

Each returns the bytes of one command, as ``nsq.protocol`` does; they are
thin wrappers over :mod:`gnsqlite.protocol`, so names and sizes are checked
(an invalid topic raises :class:`~gnsqlite.errors.InvalidNameError`, a
``ValueError``, where pynsq would send it). Durations are pynsq's integer
milliseconds here (``requeue(id, time_ms)``, ``dpub(topic, delay_ms, data)``).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from typing import Any

from .. import protocol as _p
from .message import Message

__all__ = [
    "FRAME_TYPE_ERROR",
    "FRAME_TYPE_MESSAGE",
    "FRAME_TYPE_RESPONSE",
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
    return _p.sub(topic, channel)


def ready(count: int) -> bytes:
    """``RDY <count>``."""
    return _p.rdy(count)


def finish(id: bytes | str) -> bytes:
    """``FIN <id>``."""
    return _p.fin(id)


def requeue(id: bytes | str, time_ms: int = 0) -> bytes:
    """``REQ <id> <time_ms>``: redeliver after ``time_ms`` milliseconds."""
    return _p.req(id, _seconds(time_ms, "time_ms"))


def touch(id: bytes | str) -> bytes:
    """``TOUCH <id>``."""
    return _p.touch(id)


def nop() -> bytes:
    """``NOP``."""
    return _p.nop()


def pub(topic: str, data: bytes | str) -> bytes:
    """``PUB <topic>`` with one body."""
    return _p.pub(topic, data)


def mpub(topic: str, data: Iterable[bytes | str]) -> bytes:
    """``MPUB <topic>`` with a list of bodies."""
    return _p.mpub(topic, data)


def dpub(topic: str, delay_ms: int, data: bytes | str) -> bytes:
    """``DPUB <topic> <delay_ms>``: deliver after ``delay_ms`` milliseconds."""
    return _p.dpub(topic, _seconds(delay_ms, "delay_ms"), data)


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
