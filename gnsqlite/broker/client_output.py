"""The output of one client connection: a queue of frames and the writer greenlet.

What the broker sends a client (responses, errors, messages, heartbeats) is
appended to :class:`SessionOutput`'s queue, which never blocks; the writer
greenlet sends everything queued since it last ran in one ``sendall``, so a
burst of deliveries shares a syscall. That is the spirit of nsqd's
``output_buffer_size``/``_timeout`` (batch writes) without its added
latency: the queue is flushed as soon as the greenlet that filled it yields.

nsqd's write deadline: each write may take :attr:`SessionOutput.write_timeout`
seconds (the client's heartbeat interval; ``0``: none); a client that does
not read is closed when a write stalls that long. A compressed stream leaves
in the write calls nsqd makes (see :mod:`.wire`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

import gevent
import gevent.event
import gevent.lock

from ..codecs import Codec
from .wire import empty_flush_writes, flush_writes

__all__ = ["SessionOutput"]

log = logging.getLogger("gnsqlite.broker.client")  # the session's logger

#: A mark in the output queue of a compressed connection, compared by identity
#: (no frame is this object): nsqd flushes here, after every frame but a
#: message and whenever its message pump wakes unable to send messages.
_FLUSH = b"<flush>"


class SessionOutput:
    """The socket of one client connection, its output queue and its writer greenlet.

    ``on_broken`` (the session's ``close``) is called from the writer when a
    write fails or stalls, or after the flush asked for by :meth:`close_after_flush`.
    """

    def __init__(self, sock: Any, owner: str, on_broken: Callable[[], None]) -> None:
        #: The connection's socket (replaced by its TLS socket on upgrade); the
        #: session's reader reads it too.
        self.sock = sock
        #: The codec after a snappy or deflate upgrade, ``None`` before.
        self.codec: Codec | None = None
        #: nsqd's write deadline, seconds (the heartbeat interval); 0: none.
        self.write_timeout = 0.0
        #: Bytes queued and not yet sent.
        self.queued_bytes = 0
        self.closed = False
        self._owner = owner  # for logs
        self._on_broken = on_broken
        self._out: list[bytes] = []
        self._close_after_flush = False
        self._drained = gevent.event.Event()
        self._wake = gevent.event.Event()
        #: Held while writing; an upgrade holds it to switch the stream between writes.
        self.lock = gevent.lock.Semaphore()
        self._writer: gevent.Greenlet[Any, Any] | None = None

    def start(self) -> None:
        """Start the writer greenlet (owned by this object; :meth:`close` stops it)."""
        self._writer = gevent.spawn(self._write_loop)

    def close(self, flush: bool = False) -> None:
        """Stop the writer and close the socket; never raises.

        With ``flush`` what is queued is sent first, waiting at most one second.
        """
        self.closed = True
        self._drained.set()  # a reader waiting for the writer must see the end
        writer = self._writer
        if writer is not None and writer is not gevent.getcurrent():
            writer.kill(block=False)
        if flush:
            try:
                with gevent.Timeout(1.0), self.lock:
                    self.flush_locked()
            except (Exception, gevent.Timeout) as exc:
                log.debug("%s: final flush failed: %s", self._owner, exc)
        with contextlib.suppress(OSError):
            self.sock.close()
        self._wake.set()

    def send(self, frame: bytes) -> None:
        """Queue a response or error frame (nsqd flushes after each of them); never blocks."""
        self._out.append(frame)
        self.queued_bytes += len(frame)
        if self.codec is not None:
            self._out.append(_FLUSH)
        self._wake.set()

    def send_message(self, frame: bytes) -> None:
        """Queue a message frame (nsqd flushes messages only when its buffer says so)."""
        self._out.append(frame)
        self.queued_bytes += len(frame)
        self._wake.set()

    def mark_flush(self) -> None:
        """Queue an empty flush (nsqd's message pump woke unable to send messages)."""
        self._out.append(_FLUSH)
        self._wake.set()

    def close_after_flush(self) -> None:
        """Close the connection once what is queued is sent."""
        self._close_after_flush = True
        self._wake.set()

    def wait_drained(self) -> None:
        """Block until the writer sent what is queued (or the connection ends)."""
        self._drained.clear()
        self._wake.set()
        self._drained.wait()

    def _write_loop(self) -> None:
        try:
            while not self.closed:
                self._wake.wait()
                self._wake.clear()
                if self._out:
                    deadline = self.write_timeout
                    with gevent.Timeout(deadline if deadline > 0 else None), self.lock:
                        self.flush_locked()
                self._drained.set()
                if self._close_after_flush:
                    self._on_broken()
        except gevent.Timeout:
            log.info(
                "%s: a write stalled for %.1f s (the heartbeat interval): the client"
                " does not read; closing",
                self._owner,
                self.write_timeout,
            )
            self._on_broken()
        except OSError as exc:
            log.debug("%s: send failed: %s", self._owner, exc)
            self._on_broken()

    def flush_locked(self) -> None:
        """Send what is queued now; the caller holds :attr:`lock`. Blocks on the socket."""
        out = self._out
        if not out:
            return
        self.queued_bytes = 0
        codec = self.codec
        if codec is None:
            data = b"".join(out)
            out.clear()
            self.sock.sendall(data)
            return
        writes: list[bytes] = []
        pending: list[bytes] = []
        for item in out:
            if item is not _FLUSH:
                pending.append(item)
            elif pending:
                writes += flush_writes(codec, b"".join(pending))
                pending.clear()
            else:
                writes += empty_flush_writes(codec)
        out.clear()
        if pending:
            writes += flush_writes(codec, b"".join(pending))
        for data in writes:
            self.sock.sendall(data)
