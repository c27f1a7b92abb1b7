"""A connection's reader: the reader greenlet, the one routing rule, and liveness.

The **reader** reads, decodes and routes frames: messages go to the
``on_message`` callback (which must not block: it may run in the hub
itself, see below; the reader never runs handler code), answers to
requests resolve their waiters in the order the requests were written,
heartbeats are answered with ``NOP`` at once. What goes where is written
once, in :meth:`ConnectionReader.deliver` (messages and answers, the per-message
path) and :meth:`ConnectionReader.route` (everything, in order).

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
error frame, a wrapped message, nsqd hanging up, an undecodable frame, a
waiter that raised) back to the parked reader, which handles it exactly as
when it reads itself, then parks again. While the reader is parked the hub
is the only one reading the socket, and while the reader routes what it
was handed the hub does not read at all.

Liveness has one rule: a connection that hears nothing for
:data:`DEAD_AFTER_HEARTBEATS` heartbeat intervals is dead. A
:class:`LivenessWatch` enforces it for every reader of the hub with the same
limit, on one timer of the hub's :class:`~gnsqlite.timers.TimerWheel` (owned
by the watch, cancelled when its last reader leaves): each sweep compares
every reader's time of last bytes with the limit, and ends a silent one's
receive with :class:`~gnsqlite.errors.BrokenConnectionError`. One timer, not
one per connection: a thousand idle connections cost the wheel one entry
(``benchmarks/scale.py`` measures the wheel's CPU per idle connection).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from typing import Any, Final

import gevent
import gevent.event
from gevent.hub import Waiter

from .._mypyc import mypyc_attr
from ..codecs import Codec
from ..errors import BrokenConnectionError, NSQError, RemoteProtocolError, map_io_errors
from ..protocol import (
    ClientConnection,
    CloseWait,
    ErrorReceived,
    Event,
    Heartbeat,
    MessageReceived,
    Response,
    Upgraded,
)
from ..protocol.frames import OK, MessageFields
from ..timers import Timer, TimerWheel
from .stream import READ_SIZE, Stream, read_buffer

__all__ = [
    "DEAD_AFTER_HEARTBEATS",
    "SWEEPS_PER_LIMIT",
    "ConnectionReader",
    "LivenessWatch",
    "MessageSink",
    "feed_protocol",
    "message_sink",
]

log = logging.getLogger(__name__)

#: Bound once: a Final is a C global in the compiled build (``time.monotonic`` is a
#: module attribute lookup each time); read on every read.
_monotonic: Final = time.monotonic

#: Heartbeat intervals of silence after which a connection is dead.
DEAD_AFTER_HEARTBEATS = 2
#: Sweeps of a :class:`LivenessWatch` per silence limit: a silent connection
#: ends between ``limit`` and ``limit * (1 + 1 / SWEEPS_PER_LIMIT)`` seconds
#: after its last bytes.
SWEEPS_PER_LIMIT = 4
#: The hub's wheel, bound once: a connection's liveness is never on a test's fake wheel.
_hub_wheel = TimerWheel.for_hub
#: Plain bytes decompressed at a time before the frame decoder runs.
_DECODE_STEP = 64 * 1024


def feed_protocol(
    protocol: ClientConnection,
    codec: Codec | None,
    data: bytes,
    name: str,
    route: Callable[[list[Event]], None] | None = None,
) -> None:
    """Hand bytes read to ``protocol``, decompressing ``_DECODE_STEP`` at a time.

    A compressed stream is decoded in bounded steps, so what a peer's
    compression ratio decides (256 KiB of deflate inflate to 256 MiB) is
    never held at once: between steps the protocol parses what it has
    (refusing an oversized frame at its header) and, with ``route``, the
    events found are routed. Raises :class:`~gnsqlite.errors.RemoteProtocolError`
    (naming ``name``) for undecodable data.
    """
    if codec is None:
        protocol.receive_data(data)
        return
    while True:
        try:
            plain = codec.decode(data, _DECODE_STEP)
        except Exception as exc:  # RemoteProtocolError from the codec, or a codec's own
            raise RemoteProtocolError(f"{name}: undecodable compressed data: {exc}") from exc
        data = b""
        protocol.receive_data(plain)
        if not codec.pending:
            return
        if route is not None:
            route(protocol.events())


@mypyc_attr(allow_interpreted_subclasses=True)  # the compiled build: the links derive from it
class MessageSink:
    """What a connection hands its messages to, as a base class: the Consumer's links are ones.

    When a connection's ``on_message`` is the ``on_message`` method of one
    (:func:`message_sink`), the compiled reader calls it directly (a C call
    through the class's method table) instead of through Python's calling
    convention; any other callable is called as before.
    """

    __slots__ = ()

    def on_message(self, conn: Any, message: Any) -> None:
        """Take ``message``, just read on ``conn``; must not block."""
        raise NotImplementedError


def message_sink(on_message: Callable[[Any, Any], None] | None) -> MessageSink | None:
    """The :class:`MessageSink` whose own ``on_message`` method ``on_message`` is, or ``None``."""
    owner = getattr(on_message, "__self__", None)
    if isinstance(owner, MessageSink) and on_message == owner.on_message:
        return owner
    return None


class ConnectionReader:
    """Reading one connection's stream; see the module docstring.

    ``owner`` is the :class:`~gnsqlite.connection.Connection`: the first
    argument of every callback, and where the time of the last bytes read
    is kept (``owner.last_received``, read per message by consumers).
    ``on_message(owner, message)``, ``on_error(owner, error)`` and
    ``on_heartbeat(owner)`` are the connection's callbacks; ``queue(data)``
    queues bytes to write (the NOP answering a heartbeat); ``on_end(error)``
    runs once when reading ends by itself (nsqd hung up, a network,
    protocol or fatal server error), never after :meth:`stop`. ``heartbeat_interval`` (seconds, or
    ``None``) sets the liveness rule. The constructor opens nothing and
    starts no greenlet: :meth:`start` does.
    """

    def __init__(
        self,
        owner: Any,
        protocol: ClientConnection,
        *,
        heartbeat_interval: float | None,
        queue: Callable[[bytes], None],
        on_end: Callable[[Exception | None], None],
        on_message: Callable[[Any, Any], None] | None = None,
        on_error: Callable[[Any, Any], None] | None = None,
        on_heartbeat: Callable[[Any], None] | None = None,
    ) -> None:
        self.owner = owner
        self.name: str = owner.name
        self.protocol = protocol
        self.heartbeat_interval = heartbeat_interval
        self.queue = queue
        self.on_end = on_end
        self.on_message = on_message  # a Message, or the protocol's message_class
        self._sink = message_sink(on_message)  # on_message, when a sink's own: called directly
        self.on_error = on_error
        self.on_heartbeat = on_heartbeat
        #: Set when nsqd answered CLS with ``CLOSE_WAIT`` (or the connection ended).
        self.close_wait = gevent.event.Event()
        self.greenlet: gevent.Greenlet[[], None] | None = None
        self.stream: Stream | None = None
        self.codec: Codec | None = None
        self.stopped = False
        self._in_recv = False  # waiting in its receive (where silence may end it)
        self._liveness: LivenessWatch | None = None  # the watch it joined while reading
        self.watch: Any = None  # the io watcher of the hub's reads (see _park)
        self._parked: Waiter[Any] | None = None  # the parked reader's gevent Waiter
        self._loop: Any = None
        self._view = memoryview(b"")  # the thread's read buffer, from start()

    # -- starting and stopping ---------------------------------------------------

    def start(self, stream: Stream, codec: Codec | None) -> None:
        """Read ``stream`` (through ``codec``) from now on; starts the reader greenlet."""
        self.stream = stream
        self.codec = codec
        self.owner.last_received = time.monotonic()
        self._loop = gevent.get_hub().loop
        self._view = read_buffer()  # this thread's, shared with its other connections
        self.greenlet = gevent.spawn(self._read_loop)

    def stop(self) -> None:
        """Read nothing more: the hub stops reading, the greenlet is killed. Does not block."""
        self.stopped = True
        self._stop_watch()
        self.close_wait.set()
        greenlet = self.greenlet
        if greenlet is not None and greenlet is not gevent.getcurrent():
            greenlet.kill(block=False)

    # -- bytes in ------------------------------------------------------------------

    def feed(self, data: bytes, route: Callable[[list[Event]], None] | None = None) -> None:
        """Hand received bytes to the protocol (see :func:`feed_protocol`)."""
        feed_protocol(self.protocol, self.codec, data, self.name, route)

    # -- routing: the one rule ---------------------------------------------------

    def deliver(self, events: list[Event], start: int = 0) -> int:
        """Route the messages and answers among ``events`` from ``start``, up to the first other.

        The per-message half of the routing rule: a message (of the
        protocol's ``message_class``, or in a :class:`MessageReceived`) goes
        to ``on_message`` (an exception in it is logged), an answer to its
        waiter. Returns the index of the first event that is neither (a
        heartbeat, an error frame, a message with no ``on_message``, an
        answer nobody waits for ...), or ``len(events)``: :meth:`route`
        handles that one. Runs in the reader greenlet or in the hub.
        """
        on_message = self.on_message
        sink = self._sink
        bare = self.protocol.message_class  # its messages are events of their own
        owner = self.owner
        for index in range(start, len(events)):
            event = events[index]
            kind: type[Any] = type(event)  # a message_class need not be an Event
            if kind is bare and on_message is not None:
                try:
                    if sink is not None:
                        sink.on_message(owner, event)
                    else:
                        on_message(owner, event)
                except Exception:
                    log.exception("%s: callback %r failed", self.name, on_message)
            elif kind is MessageReceived and on_message is not None:
                try:
                    on_message(owner, event.message)  # type: ignore[attr-defined]
                except Exception:
                    log.exception("%s: callback %r failed", self.name, on_message)
            elif kind is Response and event.waiter is not None:  # type: ignore[attr-defined]
                event.waiter.set(event.data)  # type: ignore[attr-defined]
            else:
                return index
        return len(events)

    def route(self, events: list[Event]) -> None:
        """Route every one of ``events``, in order: :meth:`deliver`, and the rest here.

        A fatal error frame raises it (ending the connection); a heartbeat
        queues the NOP the protocol prepared. Runs in the reader greenlet.
        """
        index = self.deliver(events)
        count = len(events)
        if index == count:
            return
        while index < count:
            self._route_other(events[index])
            index = self.deliver(events, index + 1)
        nop = self.protocol.data_to_send()  # a heartbeat among them queued one
        if nop:
            self.queue(nop)

    def _route_other(self, event: Event) -> None:
        """An event :meth:`deliver` leaves: anything but a message or an awaited answer."""
        if isinstance(event, ErrorReceived):
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
            self.close_wait.set()
        elif isinstance(event, Heartbeat):
            log.debug("%s: heartbeat", self.name)
            if self.on_heartbeat is not None:
                self._call(self.on_heartbeat)
        elif isinstance(event, (MessageReceived, MessageFields, bytes)):  # bytes: a message's data
            log.warning("%s: a message arrived on a connection without on_message", self.name)
        elif isinstance(event, Upgraded):  # pragma: no cover - only during the handshake
            raise RemoteProtocolError(f"unexpected upgrade confirmation {event.kind!r}")
        # A Response nobody waits for (a publish sent without a waiter): nothing to do.

    def _call(self, callback: Callable[..., None], *args: Any) -> None:
        """Run a user callback; an exception in it is logged, never kills the reader."""
        try:
            callback(self.owner, *args)
        except Exception:
            log.exception("%s: callback %r failed", self.name, callback)

    # -- liveness: the one rule, on the hub's timer wheel -----------------------

    def _start_silence_timer(self, limit: float) -> None:
        """Join the hub's :class:`LivenessWatch` of ``limit`` seconds (its one wheel timer)."""
        self._liveness = LivenessWatch.of(limit)
        self._liveness.add(self)

    def _stop_silence_timer(self) -> None:
        watch, self._liveness = self._liveness, None
        if watch is not None:
            watch.discard(self)

    def silent(self, limit: float) -> bool:
        """The watch found nothing heard for ``limit`` s: end the reader; ``True`` if it did.

        A reader busy outside its receive (a slow callback) is looked at again
        at the next sweep. Runs in a timer greenlet of the wheel.
        """
        reader = self.greenlet
        if self.stopped or reader is None or reader.dead or not self._in_recv:
            return False
        reader.kill(
            BrokenConnectionError(
                self.name,
                "nothing heard for two heartbeat intervals"  # DEAD_AFTER_HEARTBEATS
                f" ({self.heartbeat_interval} s each): the connection is dead",
            ),
            block=False,
        )
        return True

    # -- the reader greenlet ---------------------------------------------------------

    def _read_loop(self) -> None:
        error: Exception | None = None
        interval = self.heartbeat_interval
        stream = self.stream
        assert stream is not None  # start() set it
        owner = self.owner
        try:
            if interval is not None:
                self._start_silence_timer(DEAD_AFTER_HEARTBEATS * interval)
            protocol = self.protocol
            route = self.route
            recv_into = stream.recv_into
            view = self._view
            wait_readable = stream.wait_readable
            raw = stream.hub_readable
            # The hub reads: a publisher's connection, or a consumer's whose
            # messages are their own events (plain TCP, no compression).
            parks = (
                raw is not None
                and (self.on_message is None or protocol.message_class is not None)
                and self.codec is None
            )
            hub_recv_into = stream.hub_recv_into if parks else None
            short = False
            with map_io_errors(self.name, "read failed"):
                while True:
                    self._in_recv = True
                    if hub_recv_into is not None:
                        route(self._park(raw, hub_recv_into))  # more than answers and messages
                        continue
                    if short:
                        wait_readable()
                    size = recv_into(view)
                    self._in_recv = False
                    if not size:
                        raise BrokenConnectionError(self.name, "nsqd closed the connection")
                    short = size < READ_SIZE
                    data = view[:size].tobytes()  # copied out before anything can switch
                    owner.last_received = _monotonic()
                    if self.codec is None:
                        protocol.receive_data(data)
                    else:
                        self.feed(data, route)
                    route(protocol.events())
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
        if not self.stopped:
            self.on_end(error)

    # -- answers and messages read by the hub (see the module docstring) ------------

    def _park(self, raw: Any, recv_into: Callable[[memoryview], int]) -> list[Event]:
        """Reader greenlet: leave the reading to the hub until it meets more than answers.

        While parked, the hub reads the socket ``raw`` itself when it is readable
        (:meth:`_on_readable`) and delivers the answers and messages it finds
        (:meth:`deliver`), with no switch to this greenlet and back. Anything
        else is handed back: returns the events from the first such one on,
        for the caller to route in order. Raises what ended the hub's read
        (nsqd closed, a socket error, an undecodable frame, a failing
        waiter). Blocks.
        """
        watch = self.watch
        if watch is None:
            watch = self.watch = self._loop.io(raw.fileno(), 1)
        waiter: Waiter[Any] = Waiter()
        self._parked = waiter
        watch.start(self._on_readable, recv_into)
        try:
            handed = waiter.get()
        finally:
            self._parked = None
            watch.stop()
        if isinstance(handed, BaseException):
            raise handed
        return handed  # type: ignore[no-any-return]

    def _on_readable(self, recv_into: Callable[[memoryview], int]) -> None:
        """Runs in the hub when a parked reader's socket is readable; never blocks or raises.

        ``recv_into`` reads the OS socket (the stream's ``hub_recv_into``).
        """
        waiter = self._parked
        if waiter is None or self.stopped:  # pragma: no cover - the watch stops before either
            return
        handed: list[Event] | BaseException
        try:
            view = self._view
            # Two statements: mypyc (2.4.1) evaluates a memoryview slice's bound twice,
            # so the compiled build would read twice and lose the first read's bytes.
            size = recv_into(view)
            data = view[:size].tobytes()  # copied out of the thread's buffer
            protocol = self.protocol
            answered = protocol.publish_answers(data) if self.on_message is None else None
            if answered is not None:  # only OKs to publishes: no frames decoded, no events
                self.owner.last_received = _monotonic()
                for answer in answered:
                    if answer is not None:
                        answer.set(OK)
                return  # stay parked
            if not data:
                handed = BrokenConnectionError(self.name, "nsqd closed the connection")
            else:
                self.owner.last_received = _monotonic()
                protocol.receive_data(data)
                events = protocol.events()
                index = self.deliver(events)
                if index == len(events):
                    return  # only answers and messages: stay parked
                handed = events[index:]
        except (BlockingIOError, InterruptedError):
            return  # woken with nothing to read after all
        except Exception as exc:  # the reader raises it, as if it had read itself
            handed = exc
        self._parked = None
        self.watch.stop()
        waiter.switch(handed)

    def _stop_watch(self) -> None:
        """Stop the hub's reads (before the socket closes)."""
        watch = self.watch
        if watch is not None:
            watch.stop()


class LivenessWatch:
    """The liveness rule for every reader of one hub with the same silence limit.

    One repeating timer on the hub's wheel (owned by the watch: added with
    the first reader, cancelled when the last one leaves) sweeps every
    ``limit / SWEEPS_PER_LIMIT`` seconds: a reader whose owner heard nothing
    for ``limit`` seconds (``owner.last_received``) is ended
    (:meth:`ConnectionReader.silent`). A sweep is one comparison per reader;
    readers join and leave in O(1). Get a hub's watch with :meth:`of`.
    """

    def __init__(self, wheel: TimerWheel, limit: float) -> None:
        self.wheel = wheel
        self.limit = limit
        #: The readers watched, in the order they joined (a dict as an ordered set).
        self.readers: dict[ConnectionReader, None] = {}
        self._timer: Timer | None = None

    @classmethod
    def of(cls, limit: float) -> LivenessWatch:
        """The current hub's watch of ``limit`` seconds, made on first use."""
        wheel = _hub_wheel()
        watches = _WATCHES.get(wheel)
        if watches is None:
            watches = _WATCHES[wheel] = {}
        watch = watches.get(limit)
        if watch is None:
            watch = watches[limit] = cls(wheel, limit)
        return watch

    def add(self, reader: ConnectionReader) -> None:
        """Watch ``reader`` from now on; starts the sweeps if it is the first. Does not block."""
        self.readers[reader] = None
        if self._timer is None:
            self._timer = self.wheel.call_every(
                self.limit / SWEEPS_PER_LIMIT, self.sweep, owner=self
            )

    def discard(self, reader: ConnectionReader) -> None:
        """Stop watching ``reader``; the last one out cancels the sweeps. Safe to call twice."""
        self.readers.pop(reader, None)
        if not self.readers and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def sweep(self, now: float | None = None) -> int:
        """End every reader silent for the limit (``now``: ``time.monotonic()``); how many."""
        now = time.monotonic() if now is None else now
        limit = self.limit
        ended = 0
        for reader in [r for r in self.readers if now - r.owner.last_received >= limit]:
            if reader.silent(limit):
                ended += 1
        return ended


#: Each wheel's liveness watches by silence limit (seconds).
_WATCHES: weakref.WeakKeyDictionary[TimerWheel, dict[float, LivenessWatch]] = (
    weakref.WeakKeyDictionary()
)
