"""A drop-in for pynsq: ``import nsq`` becomes ``from gnsqlite import nsq``.

pynsq's public surface, mapped onto gnsqlite's gevent
:class:`~gnsqlite.consumer.Consumer` and :class:`~gnsqlite.producer.Producer`:

* :class:`Reader` with pynsq's arguments, units, handler contract and hooks;
* :class:`Writer` with ``pub``/``mpub``/``dpub`` and ``(conn, data)``
  callbacks, plus a graceful ``close()``;
* :class:`Message` with pynsq's methods and attributes;
* :func:`run` (until SIGINT/SIGTERM, then everything closes drained);
* :class:`Error`, :class:`SendError`, the name checks, the ``FRAME_TYPE_*``
  constants and the byte-building helpers;
* :class:`AsyncConn` and :class:`SyncConn` (on gevent sockets),
  :class:`BackoffTimer`, :class:`LegacyReader`, and pynsq's submodules
  (``nsq.protocol``, ``nsq.reader``, ``nsq.writer``, ``nsq.conn``,
  ``nsq.event``, ``nsq.message``, ``nsq.sync``, ``nsq.backoff_timer``).

Handlers may return coroutines or Futures (they are awaited), ``pub()``
returns an awaitable, and a program that runs tornado's IOLoop itself, or
a plain asyncio loop (``asyncio.run()``), instead of :func:`run` works too
(see :mod:`.tornado_bridge`). Under :func:`run`, a first Ctrl-C closes
drained and says what it waits for; a second requeues what is unanswered
and returns (see :mod:`.runner`).

Importing it imports no tornado and patches nothing. What differs from pynsq
is listed in docs/migrating-pynsq.md.
"""

from __future__ import annotations

from .backoff_timer import BackoffTimer
from .conn import AsyncConn
from .errors import ConnectionClosedError, Error, IntegrityError, SendError
from .legacy_reader import LegacyReader
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
from .sync import SyncConn
from .writer import Writer

__all__ = [
    "AsyncConn",
    "BackoffTimer",
    "FRAME_TYPE_ERROR",
    "FRAME_TYPE_MESSAGE",
    "FRAME_TYPE_RESPONSE",
    "ConnectionClosedError",
    "Error",
    "IntegrityError",
    "LegacyReader",
    "Message",
    "Reader",
    "SendError",
    "SyncConn",
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
