"""A connection's writer: commands written in batches, and the writer greenlet.

Commands are written in batches: the first command queued in a turn of the
event loop schedules one flush, a callback the hub runs before it next polls
the sockets, and that flush sends everything queued by then in one ``send``.
So commands written close together (a burst of FINs, a FIN and its RDY,
pipelined PUBs) share a syscall, a lone command (one PUB at a time,
``max_in_flight=1``) goes out without a switch to another greenlet, and
commands written by many greenlets never interleave. The flush never waits:
what the stream does not take at once is left to the **writer** greenlet,
ahead of anything queued later, so no caller and not the hub ever blocks on
a slow nsqd. On TLS streams the writer greenlet does all the writing.

:class:`ConnectionWriter` owns that state and its greenlet; the
:class:`~gnsqlite.connection.Connection` holds one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

import gevent
import gevent.event

from .._mypyc import mypyc_attr
from ..codecs import Codec
from ..errors import NSQError, map_io_errors
from .stream import Stream

__all__ = ["FLUSH_AT", "ConnectionWriter"]

log = logging.getLogger(__name__)

#: Commands queued in one turn of the loop after which they are sent at once
#: (about 4 KiB of FINs, as go-nsq's buffered writer sends them).
FLUSH_AT: Final = 200


def _write_nothing() -> None:
    """A stopped writer's flush: it sends nothing more."""


@mypyc_attr(allow_interpreted_subclasses=True)  # the compiled build: tests record its calls
class ConnectionWriter:
    """Batched writes to one stream, and the greenlet that waits on it; see the module docstring.

    ``name`` is the connection's (for logs and errors); ``on_failure(error)``
    runs once, in the writer greenlet, when a write fails (the connection
    ends). The constructor opens nothing and starts no greenlet:
    :meth:`start` does, once the stream is connected.
    """

    def __init__(self, name: str, on_failure: Callable[[Exception], None]) -> None:
        self.name = name
        self.on_failure = on_failure
        self.outbox: list[bytes] = []  # commands queued, not yet encoded
        #: True while a flush is scheduled on the hub for this turn.
        self.flush_scheduled = False
        #: True on a TLS stream: every write is the writer greenlet's.
        self.tls = False
        self.stream: Stream | None = None
        self.greenlet: gevent.Greenlet[[], None] | None = None
        self._codec: Codec | None = None
        self._unsent = b""  # encoded bytes a flush left over: the writer sends them first
        self._writing = False  # the writer greenlet is inside a send that may wait
        self._flush_handle: Any = None  # the hub callback of the scheduled flush
        # _flush_callback bound once (start), not per scheduled flush: in the compiled
        # build each binding makes a method object (some 400 instructions with its
        # release, once per message at max_in_flight 1). stop() lets it go.
        self._flush_soon: Callable[[], None] = _write_nothing
        self._loop: Any = None  # the hub's loop, which runs the flushes
        self._wakeup = gevent.event.Event()
        self._draining = False  # asked to send what is queued and stop
        self._stopped = False

    def start(self, stream: Stream, codec: Codec | None) -> None:
        """Write to ``stream`` (through ``codec``) from now on; starts the writer greenlet."""
        self.stream = stream
        self.tls = stream.tls
        self._codec = codec
        self._loop = gevent.get_hub().loop
        self._flush_soon = self._flush_callback
        self.greenlet = gevent.spawn(self._write_loop)

    def encode(self, data: bytes) -> bytes:
        """``data`` through the stream's codec (unchanged when uncompressed)."""
        return self._codec.encode(data) if self._codec is not None else data

    def queue(self, data: bytes, now: bool = False) -> None:
        """Queue ``data``; it goes out with this turn's flush. Never blocks.

        ``now``: send it (and what is queued before it) at once, as
        :meth:`flush` does, rather than with the hub's next flush.
        """
        outbox = self.outbox
        outbox.append(data)
        # The rule: when this says nothing is to do, the flush already
        # scheduled takes it. Connection.finish copies this test (its hot
        # path); tests/unit/test_connection.py checks that the two agree.
        if now or self.tls or not self.flush_scheduled or len(outbox) >= FLUSH_AT:
            self.queued(now)

    def queued(self, now: bool = False) -> None:
        """After a command was appended to :attr:`outbox`: see that it goes out (now: at once)."""
        outbox = self.outbox
        if self.tls:
            self._wakeup.set()  # gevent's TLS socket cannot try a send without waiting
        elif now:
            self._flush()
            if self.flush_scheduled and not outbox:
                self._unschedule()
        elif len(outbox) >= FLUSH_AT:
            # A long burst (FINs while a backlog is handled): send part of it
            # now, so nsqd refills the window while the rest is handled.
            self._flush()
        elif not self.flush_scheduled:
            self.flush_scheduled = True
            self._flush_handle = self._loop.run_callback(self._flush_soon)

    def flush(self) -> None:
        """Send what is queued now rather than when the hub next polls. Does not block.

        For a caller that knows nothing will join the batch this turn (a
        publish that blocks, with no other publisher about to run): nsqd
        starts on it while the caller finishes its own bookkeeping. On TLS
        the writer greenlet sends it, as always.
        """
        if self.tls:
            self._wakeup.set()
            return
        self._flush()
        if self.flush_scheduled and not self.outbox:
            self._unschedule()

    def _unschedule(self) -> None:
        """The hub's flush would find nothing: drop it (a callback a publish)."""
        self.flush_scheduled = False
        self._flush_handle.stop()

    def _flush_callback(self) -> None:
        self.flush_scheduled = False
        self._flush()

    def _flush(self) -> None:
        """Send what is queued without waiting; runs in the hub before it polls, or inline.

        Bytes the stream does not take at once, and any failure, are left
        to the writer greenlet (which ends the connection on an error, as
        for its own writes).
        """
        outbox = self.outbox
        if not outbox or self._stopped:
            return
        if self._writing or self._unsent or self._draining:
            self._wakeup.set()  # the writer is busy or finishing: order is its job
            return
        data = outbox[0] if len(outbox) == 1 else b"".join(outbox)
        try:
            if self._codec is not None:
                data = self._codec.encode(data)
        except Exception:
            self._wakeup.set()  # the writer meets the same failure and ends the connection
            return
        outbox.clear()
        try:
            sent = self.stream.send_nowait(data)  # type: ignore[union-attr]
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            log.debug("%s: write failed (%s); left to the writer", self.name, exc)
            sent = 0
        if sent < len(data):
            self._unsent = data[sent:]
            self._wakeup.set()

    def _write_loop(self) -> None:
        outbox = self.outbox
        try:
            with map_io_errors(self.name, "write failed"):
                while True:
                    self._wakeup.wait()
                    self._wakeup.clear()
                    if outbox or self._unsent:
                        data = self._unsent
                        if outbox:
                            data += self.encode(b"".join(outbox))
                            outbox.clear()
                        self._unsent = b""
                        self._writing = True
                        try:
                            self.stream.sendall(data)  # type: ignore[union-attr]
                        finally:
                            self._writing = False
                    if self._draining and not outbox and not self._unsent:
                        return
        except NSQError as exc:  # a network failure, mapped at the edge, or an encoding one
            if not self._stopped:
                self.on_failure(exc)
        except gevent.GreenletExit:
            return

    def drain(self, timeout: float) -> None:
        """Send everything queued, then let the greenlet end; blocks up to ``timeout`` seconds."""
        greenlet = self.greenlet
        if greenlet is None or greenlet is gevent.getcurrent() or self._stopped:
            return
        self._draining = True
        self._wakeup.set()
        greenlet.join(timeout)

    @property
    def draining(self) -> bool:
        """True once :meth:`drain` was asked: no command may be queued any more."""
        return self._draining

    def stop(self) -> None:
        """Write nothing more: drop what is queued, kill the greenlet (unless it is the caller)."""
        self._stopped = True
        self._flush_soon = _write_nothing  # the bound method held self: a cycle
        self.outbox.clear()
        self._unsent = b""
        greenlet = self.greenlet
        if greenlet is not None and greenlet is not gevent.getcurrent():
            greenlet.kill(block=False)
