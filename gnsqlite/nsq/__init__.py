"""A drop-in for pynsq: ``import nsq`` becomes ``from gnsqlite import nsq``.

pynsq's public surface, mapped onto gnsqlite's gevent
:class:`~gnsqlite.consumer.Consumer` and :class:`~gnsqlite.producer.Producer`:

* :class:`Reader` with pynsq's arguments, units, handler contract and hooks;
* :class:`Writer` with ``pub``/``mpub``/``dpub`` and ``(conn, data)``
  callbacks, plus a graceful ``close()``;
* :class:`Message` with pynsq's methods and attributes;
* :func:`run` (until SIGINT/SIGTERM, then everything closes drained);
* :class:`Error`, :class:`SendError`, the name checks, the ``FRAME_TYPE_*``
  constants and the byte-building helpers.

Importing it imports no tornado and patches nothing. What differs from pynsq
is listed in docs/migrating-pynsq.md.
"""

from __future__ import annotations

from .errors import ConnectionClosedError, Error, IntegrityError, SendError
from .message import Message
from .protocol import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    auth,
    decode_message,
    dpub,
    finish,
    identify,
    mpub,
    nop,
    pub,
    ready,
    requeue,
    subscribe,
    touch,
    unpack_response,
    valid_channel_name,
    valid_topic_name,
)
from .reader import Reader
from .runner import run, stop
from .writer import Writer

__all__ = [
    "FRAME_TYPE_ERROR",
    "FRAME_TYPE_MESSAGE",
    "FRAME_TYPE_RESPONSE",
    "ConnectionClosedError",
    "Error",
    "IntegrityError",
    "Message",
    "Reader",
    "SendError",
    "Writer",
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
    "run",
    "stop",
    "subscribe",
    "touch",
    "unpack_response",
    "valid_channel_name",
    "valid_topic_name",
]
