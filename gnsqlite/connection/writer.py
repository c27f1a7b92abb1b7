"""The writing half of a :class:`~gnsqlite.connection.Connection`: batched writes, the writer.

Commands are written in batches: the first command queued in a turn of the
event loop schedules one flush, a callback the hub runs before it next polls
the sockets, and that flush sends everything queued by then in one ``send``.
So commands written close together (a burst of FINs, a FIN and its RDY,
pipelined PUBs) share a syscall, a lone command (one PUB at a time,
``max_in_flight=1``) goes out without a switch to another greenlet, and
commands written by many greenlets never interleave. The flush never waits:
what the socket does not take at once is left to the **writer** greenlet,
ahead of anything queued later, so no caller and not the hub ever blocks on
a slow nsqd. On TLS connections the writer greenlet does all the writing.

A mixin: the attributes it uses are the Connection's (see
:mod:`gnsqlite.connection`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import gevent
import gevent.event

from ..codecs import Codec
from ..errors import NSQError, map_io_errors

__all__ = ["FLUSH_AT", "Writer"]

log = logging.getLogger("gnsqlite.connection")  # the connection's logger, as before the split

#: Commands queued in one turn of the loop after which they are sent at once
#: (about 4 KiB of FINs, as go-nsq's buffered writer sends them).
FLUSH_AT = 200
_FLUSH_AT = FLUSH_AT


class Writer:
    """Writing a :class:`~gnsqlite.connection.Connection`; see the module docstring."""

    name: str
    _sock: Any
    _codec: Codec | None
    closed: bool
    _tls: bool
    _loop: Any
    _outbox: list[bytes]
    _unsent: bytes
    _writing: bool
    _flush_scheduled: bool
    _flush_handle: Any
    _wakeup: gevent.event.Event
    _draining: bool

    if TYPE_CHECKING:

        def _end(self, error: Exception | None) -> None: ...

    def _encode(self, data: bytes) -> bytes:
        return self._codec.encode(data) if self._codec is not None else data

    def _queue(self, data: bytes) -> None:
        """Queue ``data``; it goes out with this turn's flush. Never blocks."""
        outbox = self._outbox
        outbox.append(data)
        if self._tls or not self._flush_scheduled or len(outbox) >= _FLUSH_AT:
            self._queued()  # otherwise the flush already scheduled takes it

    def _queued(self) -> None:
        """After a command was appended to the outbox: see that it goes out."""
        outbox = self._outbox
        if self._tls:
            self._wakeup.set()  # gevent's TLS socket cannot try a send without waiting
        elif len(outbox) >= _FLUSH_AT:
            # A long burst (FINs while a backlog is handled): send part of it
            # now, so nsqd refills the window while the rest is handled.
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._flush_handle = self._loop.run_callback(self._flush_callback)

    def flush(self) -> None:
        """Send what is queued now rather than when the hub next polls. Does not block.

        For a caller that knows nothing will join the batch this turn (a
        publish that blocks, with no other publisher about to run): nsqd
        starts on it while the caller finishes its own bookkeeping. A TLS
        connection leaves it to its writer greenlet, as always.
        """
        if not self._tls:
            self._flush()
            if self._flush_scheduled and not self._outbox:
                # The hub's flush would find nothing: drop it (a callback a publish).
                self._flush_scheduled = False
                self._flush_handle.stop()

    def _flush_callback(self) -> None:
        self._flush_scheduled = False
        self._flush()

    def _flush(self) -> None:
        """Send what is queued without waiting; runs in the hub before it polls, or inline.

        Bytes the socket does not take at once, and any failure, are left
        to the writer greenlet (which ends the connection on an error, as
        for its own writes).
        """
        outbox = self._outbox
        if not outbox or self.closed:
            return
        if self._writing or self._unsent or self._draining:
            self._wakeup.set()  # the writer is busy or finishing: order is its job
            return
        data = outbox[0] if len(outbox) == 1 else b"".join(outbox)
        try:
            if self._codec is not None:  # _encode, inlined
                data = self._codec.encode(data)
        except Exception:
            self._wakeup.set()  # the writer meets the same failure and ends the connection
            return
        outbox.clear()
        try:
            sent = self._sock.send(data, 0, 0.0)  # timeout 0.0: never wait
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            log.debug("%s: write failed (%s); left to the writer", self.name, exc)
            sent = 0
        if sent < len(data):
            self._unsent = data[sent:]
            self._wakeup.set()

    def _send(self, data: bytes) -> None:
        """Send all of ``data``; waits while the socket is full."""
        sent = self._sock.send(data)
        if sent < len(data):
            self._sock.sendall(memoryview(data)[sent:])

    def _write_loop(self) -> None:
        outbox = self._outbox
        try:
            with map_io_errors(self.name, "write failed"):
                while True:
                    self._wakeup.wait()
                    self._wakeup.clear()
                    if outbox or self._unsent:
                        data = self._unsent
                        if outbox:
                            data += self._encode(b"".join(outbox))
                            outbox.clear()
                        self._unsent = b""
                        self._writing = True
                        try:
                            self._send(data)
                        finally:
                            self._writing = False
                    if self._draining and not outbox and not self._unsent:
                        return
        except NSQError as exc:  # a network failure, mapped at the edge, or an encoding one
            if not self.closed:
                self._end(exc)
        except gevent.GreenletExit:
            return

