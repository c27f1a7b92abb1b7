"""The reading half of :class:`~gnsqlite.connection.Connection`: the reader greenlet and liveness.

The **reader** reads, decodes and routes frames: messages go to the
``on_message`` callback (which must not block: it may run in the hub
itself, see below; the reader never runs handler code), answers to
requests resolve their waiters in the order the requests were written,
heartbeats are answered with ``NOP`` at once.

On a publisher's connection (no ``on_message``, plain TCP, no compression)
the reader **parks** and the hub reads the socket itself when it is
readable: it resolves the waiters of the answers it finds, so a blocking
publish costs two greenlet switches (to the hub and back) instead of four
(to the hub, the reader, the hub and back). A consumer's connection (plain
TCP, no compression) whose protocol reports messages as their own events
(``message_class``) parks too, and the hub calls ``on_message`` for each
message itself: at ``max_in_flight=1`` a message costs the switches to the
handler and back, not those to the reader and back as well. The hub hands
anything that is more than an answer or such a message (a heartbeat, an
error frame, a wrapped message, nsqd hanging
up, an undecodable frame, a waiter that raised) back to the parked reader,
which handles it exactly as when it reads itself, then parks again. While
the reader is parked the hub is the only one reading the socket, and while
the reader routes what it was handed the hub does not read at all.

Liveness has one rule: a connection that hears nothing for
:data:`DEAD_AFTER_HEARTBEATS` heartbeat intervals is dead. One timer of the
hub's :class:`~gnsqlite.timers.TimerWheel` per connection (owned by it,
re-armed lazily, not per receive) enforces it by ending the reader's receive
with :class:`~gnsqlite.errors.BrokenConnectionError`.

A mixin: the attributes it uses are the Connection's (see
:mod:`gnsqlite.connection`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gevent
from gevent.hub import Waiter

from ..codecs import Codec
from ..config import ConnectionConfig
from ..errors import BrokenConnectionError, NSQError, RemoteProtocolError, map_io_errors
from ..protocol import (
    ClientConnection,
    CloseWait,
    Delivery,
    ErrorReceived,
    Event,
    Heartbeat,
    MessageReceived,
    Response,
    Upgraded,
)
from ..protocol.frames import OK
from ..timers import Timer, TimerWheel

__all__ = ["DEAD_AFTER_HEARTBEATS", "Reader"]

log = logging.getLogger("gnsqlite.connection")  # the connection's logger, as before the split

#: Heartbeat intervals of silence after which a connection is dead.
DEAD_AFTER_HEARTBEATS = 2
#: Bytes asked of one ``recv``. Below glibc's mmap threshold (128 KiB): a larger
#: buffer is mmapped for every read, then mremapped to the bytes received and
#: munmapped when freed, three system calls and a page fault per read even for a
#: 10-byte ``OK`` (strace of 1,000 MPUBs: 1,225 mmap, 1,002 mremap, 1,016 munmap
#: at 256 KiB; none at 64 KiB). nsqd writes at most its 16 KiB output buffer at a time.
_RECV_SIZE = 64 * 1024
#: The hub's wheel, bound once: a connection's liveness is never on a test's fake wheel.
_hub_wheel = TimerWheel.for_hub
#: Plain bytes decompressed at a time before the frame decoder runs.
_DECODE_STEP = 64 * 1024


class Reader:
    """Reading a :class:`~gnsqlite.connection.Connection`; see the module docstring."""

    name: str
    config: ConnectionConfig
    protocol: ClientConnection
    last_received: float
    on_message: Callable[[Any, Any], None] | None  # a Message, or the protocol's message_class
    on_error: Callable[..., None] | None
    on_heartbeat: Callable[..., None] | None
    _sock: Any
    _codec: Codec | None
    closed: bool
    _tls: bool
    _in_recv: bool
    _silence: Timer | None
    _reader: gevent.Greenlet[[], None] | None
    _close_wait: gevent.event.Event
    _loop: Any
    _watch: Any
    _parked: Waiter[Any] | None

    if TYPE_CHECKING:

        def _end(self, error: Exception | None) -> None: ...
        def _queue(self, data: bytes) -> None: ...

    def _recv(self) -> bytes:
        data: bytes = self._sock.recv(_RECV_SIZE)
        if not data:
            raise BrokenConnectionError(self.name, "nsqd closed the connection")
        return data

    def _feed(self, data: bytes, route: Callable[[Event], None] | None = None) -> None:
        """Hand received bytes to the protocol, decompressing ``_DECODE_STEP`` at a time.

        A compressed stream is decoded in bounded steps, so what a peer's
        compression ratio decides (256 KiB of deflate inflate to 256 MiB) is
        never held at once: between steps the protocol parses what it has
        (refusing an oversized frame at its header) and, with ``route``,
        the events found are routed.
        """
        codec = self._codec
        if codec is None:
            self.protocol.receive_data(data)
            return
        while True:
            try:
                plain = codec.decode(data, _DECODE_STEP)
            except Exception as exc:  # RemoteProtocolError from the codec, or a codec's own
                raise RemoteProtocolError(
                    f"{self.name}: undecodable compressed data: {exc}"
                ) from exc
            data = b""
            self.protocol.receive_data(plain)
            if not codec.pending:
                return
            if route is not None:
                for event in self.protocol.events():
                    route(event)

    # -- liveness: the one rule, on the hub's timer wheel -----------------------

    def _start_silence_timer(self, limit: float, at_least: float = 0.0) -> None:
        """Arm the liveness check: one wheel timer, not one per receive.

        It fires ``limit`` seconds after the last bytes were read (re-armed
        lazily: when it fires early it sets itself for the rest, but not
        sooner than ``at_least`` seconds), and ends a silent connection by
        raising in the reader's receive. The timer's owner is the connection.
        """
        silent = time.monotonic() - self.last_received
        self._silence = _hub_wheel().call_later(
            max(at_least, limit - silent), self._silence_check, limit, owner=self
        )

    def _stop_silence_timer(self) -> None:
        timer, self._silence = self._silence, None
        if timer is not None:
            timer.cancel()

    def _silence_check(self, limit: float) -> None:
        """Runs in a timer greenlet of the wheel when the silence timer fires."""
        self._silence = None
        reader = self._reader
        if self.closed or reader is None or reader.dead:
            return
        if time.monotonic() - self.last_received < limit:
            self._start_silence_timer(limit)  # bytes came since it was armed
            return
        if not self._in_recv:  # silent, but the reader is busy (a slow callback): look again
            self._start_silence_timer(limit, at_least=limit / 8)
            return
        reader.kill(
            BrokenConnectionError(
                self.name,
                "nothing heard for two heartbeat intervals"  # DEAD_AFTER_HEARTBEATS
                f" ({self.config.heartbeat_interval} s each): the connection is dead",
            ),
            block=False,
        )

    def _read_loop(self) -> None:
        error: Exception | None = None
        interval = self.config.heartbeat_interval
        try:
            if interval is not None:
                self._start_silence_timer(DEAD_AFTER_HEARTBEATS * interval)
            protocol = self.protocol
            route = self._route
            sock = self._sock
            # A plain gevent socket can be waited on before the receive: after
            # a short read the next receive would fail with EAGAIN (an
            # exception per round trip) before gevent waits anyway.
            wait = getattr(sock, "_wait", None) if not self._tls else None
            readable = getattr(sock, "_read_event", None)
            if readable is None:
                wait = None
            short = False
            # The OS socket under gevent's (non-blocking), for the hub's reads: plain TCP only.
            raw = getattr(sock, "_sock", None) if not self._tls else None
            with map_io_errors(self.name, "read failed"):
                while True:
                    self._in_recv = True
                    if (
                        raw is not None
                        and (self.on_message is None or protocol.message_class is not None)
                        and self._codec is None
                    ):
                        # A publisher's connection, or a consumer's whose messages
                        # are their own events: the hub reads answers and messages.
                        for event in self._park(raw):  # what was more than an answer
                            route(event)
                        nop = protocol.data_to_send()  # a heartbeat among them queued one
                        if nop:
                            self._queue(nop)
                        continue
                    if short and wait is not None:
                        wait(readable)
                    data = sock.recv(_RECV_SIZE)  # _recv, inlined
                    self._in_recv = False
                    short = len(data) < _RECV_SIZE
                    if not data:
                        raise BrokenConnectionError(self.name, "nsqd closed the connection")
                    self.last_received = time.monotonic()
                    if self._codec is None:
                        protocol.receive_data(data)
                    else:
                        self._feed(data, route)
                    routed = False
                    bare = protocol.message_class  # its messages are events of their own
                    for event in protocol.events():
                        kind = type(event)
                        if kind is bare and self.on_message is not None:
                            try:  # the hot path: _route and _call inlined
                                self.on_message(self, event)
                            except Exception:
                                log.exception("%s: callback %r failed", self.name, self.on_message)
                        elif kind is MessageReceived and self.on_message is not None:
                            try:  # the hot path: _route and _call inlined
                                self.on_message(self, event.message)  # type: ignore[attr-defined]
                            except Exception:
                                log.exception("%s: callback %r failed", self.name, self.on_message)
                        elif kind is Response and event.waiter is not None:  # type: ignore[attr-defined]
                            event.waiter.set(event.data)  # type: ignore[attr-defined]
                        else:
                            routed = True  # a heartbeat among them queues a NOP
                            route(event)
                    if routed:
                        nop = protocol.data_to_send()
                        if nop:
                            self._queue(nop)
        except NSQError as exc:  # a network failure too, mapped at the edge
            error = exc
        except gevent.GreenletExit:
            return
        except Exception as exc:  # a bug; end the connection rather than hang it
            log.exception("%s: the reader failed", self.name)
            error = BrokenConnectionError(self.name, f"reader failed: {exc!r}")
            error.__cause__ = exc
        finally:
            self._in_recv = False
            self._stop_watch()
            self._stop_silence_timer()
        if not self.closed:
            self._end(error)

    # -- a publisher's answers, read by the hub (see the module docstring) -------

    def _park(self, raw: Any) -> list[Event]:
        """Reader greenlet: leave the reading to the hub until it meets more than answers.

        While parked, the hub reads the socket itself when it is readable
        (:meth:`_on_readable`) and resolves the waiters of the answers it
        finds, with no switch to this greenlet and back. Anything else (a
        heartbeat, an error frame, a message) is handed back: returns the
        events from the first such one on, for the caller to route in order.
        Raises what ended the hub's read (nsqd closed, a socket error, an
        undecodable frame, a failing waiter). Blocks.
        """
        watch = self._watch
        if watch is None:
            watch = self._watch = self._loop.io(raw.fileno(), 1)
        waiter: Waiter[Any] = Waiter()
        self._parked = waiter
        watch.start(self._on_readable, raw)
        try:
            handed = waiter.get()
        finally:
            self._parked = None
            watch.stop()
        if isinstance(handed, BaseException):
            raise handed
        return handed  # type: ignore[no-any-return]

    def _on_readable(self, raw: Any) -> None:
        """Runs in the hub when a parked reader's socket is readable; never blocks or raises."""
        waiter = self._parked
        if waiter is None or self.closed:  # pragma: no cover - the watch stops before either
            return
        handed: list[Event] | BaseException
        try:
            data = raw.recv(_RECV_SIZE)
            answered = self.protocol.publish_answers(data) if self.on_message is None else None
            if answered is not None:  # only OKs to publishes: no frames decoded, no events
                self.last_received = time.monotonic()
                for answer in answered:
                    if answer is not None:
                        answer.set(OK)
                return  # stay parked
            if not data:
                handed = BrokenConnectionError(self.name, "nsqd closed the connection")
            else:
                self.last_received = time.monotonic()
                protocol = self.protocol
                protocol.receive_data(data)
                events = protocol.events()
                bare = protocol.message_class
                on_message = self.on_message
                for index, event in enumerate(events):
                    kind = type(event)
                    if kind is bare and on_message is not None:
                        try:  # as the reader calls it: an exception is logged
                            on_message(self, event)
                        except Exception:
                            log.exception("%s: callback %r failed", self.name, on_message)
                    elif kind is Response and event.waiter is not None:  # type: ignore[attr-defined]
                        event.waiter.set(event.data)  # type: ignore[attr-defined]
                    else:
                        handed = events[index:]
                        break
                else:
                    return  # only answers: stay parked
        except (BlockingIOError, InterruptedError):
            return  # woken with nothing to read after all
        except Exception as exc:  # the reader raises it, as if it had read itself
            handed = exc
        self._parked = None
        self._watch.stop()
        waiter.switch(handed)

    def _stop_watch(self) -> None:
        """Stop the hub's reads (before the socket closes)."""
        watch = self._watch
        if watch is not None:
            watch.stop()

    def _call(self, callback: Callable[..., None], *args: Any) -> None:
        """Run a user callback; an exception in it is logged, never kills the reader."""
        try:
            callback(self, *args)
        except Exception:
            log.exception("%s: callback %r failed", self.name, callback)

    def _route(self, event: Event) -> None:
        if isinstance(event, MessageReceived):
            if self.on_message is not None:
                self._call(self.on_message, event.message)
        elif isinstance(event, Delivery):  # a message of the protocol's message_class
            if self.on_message is not None:
                self._call(self.on_message, event)
        elif isinstance(event, Response):
            if event.waiter is not None:
                event.waiter.set(event.data)
        elif isinstance(event, ErrorReceived):
            if event.waiter is not None:
                event.waiter.set_exception(event.error)
            if event.error.fatal:
                raise event.error
            if event.command is None:  # E_FIN_FAILED and the like: no request's answer
                if self.on_error is not None:
                    self._call(self.on_error, event.error)
                else:
                    log.warning("%s: %s", self.name, event.error)
        elif isinstance(event, CloseWait):
            self._close_wait.set()
        elif isinstance(event, Heartbeat):
            log.debug("%s: heartbeat", self.name)
            if self.on_heartbeat is not None:
                self._call(self.on_heartbeat)
        elif isinstance(event, Upgraded):  # pragma: no cover - only during the handshake
            raise RemoteProtocolError(f"unexpected upgrade confirmation {event.kind!r}")

