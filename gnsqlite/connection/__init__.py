"""One connection to nsqd: the protocol state machine over a gevent socket.

:meth:`Connection.connect` blocks the calling greenlet through the whole
handshake, then starts the connection's two greenlets. The class is put
together from three halves, one module each, over the pure
:class:`~gnsqlite.protocol.ClientConnection` it holds:

* :mod:`gnsqlite.connection.handshake`: connect, IDENTIFY, TLS, snappy or
  deflate, AUTH;
* :mod:`gnsqlite.connection.reader`: the **reader** greenlet (decode and route
  frames: messages to ``on_message``, which must not block; answers to their
  waiters in request order; heartbeats answered with ``NOP``; on a plain
  connection without ``on_message``, or with a ``message_class``, it leaves
  reading answers and messages to the hub)
  and the one liveness rule (dead after two heartbeat intervals of silence);
* :mod:`gnsqlite.connection.writer`: commands written in batches, one flush a
  turn of the hub, and the **writer** greenlet for what the socket does not
  take at once (and for TLS).

This module keeps the state, the commands and closing. Network failures
surface as :class:`~gnsqlite.errors.BrokenConnectionError` carrying the
address, with the cause chained (translated once, by
:func:`~gnsqlite.errors.map_io_errors`); using a connection after
:meth:`Connection.close` raises :class:`~gnsqlite.errors.ConnectionClosedError`.

TLS verifies the server by default (system CAs and hostname checking);
``tls_context`` (an ``ssl.SSLContext`` the caller built) or the
``tls_ca_file``/``tls_cert_file``/``tls_key_file``/``tls_verify`` options
change that. When ``tls_v1=True`` and nsqd cannot do TLS, :meth:`connect`
raises :class:`~gnsqlite.errors.NegotiationError`: there is no plaintext
fallback.

Works with and without monkey-patching: it uses ``gevent.socket`` and
``gevent.ssl`` directly.
"""

from __future__ import annotations

import contextlib
import logging
import socket as _stdlib_socket
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import gevent
import gevent.event

from ..codecs import Codec
from ..config import ConnectionConfig
from ..errors import (
    BrokenConnectionError,
    ConnectionClosedError,
    NSQTimeoutError,
    ProtocolError,
    ServerError,
    map_io_errors,
)
from ..net import format_address, parse_address
from ..protocol import ClientConnection, ClientState, Delivery, commands
from ..timers import Timer
from .handshake import Handshake
from .reader import Reader
from .writer import FLUSH_AT, Writer

__all__ = ["Connection", "Waiter", "format_address", "map_io_errors", "parse_address"]

log = logging.getLogger(__name__)

MessageCallback = Callable[["Connection", Any], None]  # a Message, or the message_class
ErrorCallback = Callable[["Connection", ServerError], None]
CloseCallback = Callable[["Connection", "Exception | None"], None]
HeartbeatCallback = Callable[["Connection"], None]


class Waiter(Protocol):
    """Receives nsqd's answer to one request; a ``gevent.event.AsyncResult`` is one.

    Called in the reader greenlet, or in the hub itself on a connection
    without ``on_message`` (see :mod:`gnsqlite.connection.reader`): it must not
    block (in the hub, blocking raises and ends the connection).
    """

    def set(self, value: bytes) -> None:
        """nsqd answered (usually ``b"OK"``)."""
        ...

    def set_exception(self, exception: BaseException) -> None:
        """nsqd refused the request, or the connection ended before the answer."""
        ...


class Connection(Handshake, Reader, Writer):
    """A connection to one nsqd; see the module docstring.

    ``address`` is ``"host:port"`` or ``(host, port)``; ``config`` the
    options negotiated in IDENTIFY (default :class:`ConnectionConfig`).
    ``on_message(conn, message)`` receives pushed messages in the reader
    greenlet and must not block. ``on_error(conn, error)`` receives the
    non-fatal ``E_FIN_FAILED``/``E_REQ_FAILED``/``E_TOUCH_FAILED``.
    ``on_close(conn, error)`` runs once when a connected connection ends,
    with the error that ended it, or ``None`` after :meth:`close` (a failed
    :meth:`connect` raises instead and does not call it).
    ``on_heartbeat(conn)`` runs after each heartbeat was answered; like
    ``on_message`` it runs in the reader greenlet and must not block.
    ``message_class`` (a :class:`~gnsqlite.protocol.Delivery` subclass):
    ``on_message`` gets each message as an instance of it (built by the
    frame decoder, see :class:`~gnsqlite.protocol.Delivery`) rather than a
    :class:`~gnsqlite.protocol.Message`, and on a plain TCP connection
    without compression it is called by the hub itself, which reads the
    socket (see :mod:`gnsqlite.connection.reader`): blocking in it raises.

    The constructor opens no socket and starts no greenlet.
    """

    # What ended the connection: set once, when it ends. A class default, not
    # set in __init__: CPython 3.11 keeps an instance's attributes inline (and
    # specializes every read and method lookup on it) only up to 29 of them,
    # and a connection has 29 besides this one; one more and each read of
    # ``self.closed``, ``conn.finish`` ... on the hot paths becomes a dict
    # lookup (tests/unit/test_conn_attributes.py keeps the count).
    _error: Exception | None = None

    def __init__(
        self,
        address: str | tuple[str, int],
        config: ConnectionConfig | None = None,
        *,
        on_message: MessageCallback | None = None,
        on_error: ErrorCallback | None = None,
        on_close: CloseCallback | None = None,
        on_heartbeat: HeartbeatCallback | None = None,
        message_class: type[Delivery] | None = None,
    ) -> None:
        self.address = parse_address(address)
        self.name = format_address(self.address)
        self.config = config if config is not None else ConnectionConfig()
        self.on_message = on_message
        self.on_error = on_error
        self.on_close = on_close
        self.on_heartbeat = on_heartbeat
        self.protocol = ClientConnection(self.config.max_frame_size, message_class)
        self.identity: dict[str, Any] | None = None
        self.last_received = 0.0  # time.monotonic() of the last bytes read
        self._sock: Any = None
        self._codec: Codec | None = None
        self._outbox: list[bytes] = []  # commands queued, not yet encoded
        self._unsent = b""  # encoded bytes a flush left over: the writer sends them first
        self._writing = False  # the writer greenlet is inside a send that may wait
        self._flush_scheduled = False
        self._flush_handle: Any = None  # the hub callback of the scheduled flush
        self._loop: Any = None  # the hub's loop, which runs the flushes
        self._wakeup = gevent.event.Event()
        self._close_wait = gevent.event.Event()
        self._reader: gevent.Greenlet[[], None] | None = None
        self._writer: gevent.Greenlet[[], None] | None = None
        self._silence: Timer | None = None  # the reader's liveness timer, on the wheel
        self._in_recv = False  # the reader waits in its receive (where silence may end it)
        self._watch: Any = None  # the io watcher of the hub's reads (conn_reader._park)
        self._parked: Any = None  # the parked reader's gevent Waiter
        self._tls = False
        self._draining = False  # close() asked the writer to flush and stop
        #: True once the connection has ended, by :meth:`close` or by an error.
        #: Read it; only the connection sets it (a plain attribute: read per message).
        self.closed = False

    def __repr__(self) -> str:
        return f"<Connection {self.name} {self.protocol.state.value}>"

    # -- state -------------------------------------------------------------

    @property
    def is_connected(self) -> bool:
        """True between a successful :meth:`connect` and the end of the connection."""
        return self._reader is not None and not self.closed

    @property
    def error(self) -> Exception | None:
        """The error that ended the connection, or ``None``."""
        return self._error

    @property
    def features(self) -> dict[str, Any]:
        """What IDENTIFY negotiated (the protocol state's; ``{}`` before it)."""
        return self.protocol.features

    @property
    def max_rdy_count(self) -> int:
        """The largest RDY nsqd accepts on this connection (2500 if not negotiated)."""
        return self.protocol.max_rdy_count

    @property
    def msg_timeout(self) -> float:
        """nsqd's message timeout for this connection, in seconds (60 if not negotiated)."""
        return self.protocol.msg_timeout

    @property
    def max_msg_timeout(self) -> float:
        """How far TOUCH can extend a message, in seconds (nsqd's max_msg_timeout)."""
        return self.protocol.max_msg_timeout

    @property
    def heartbeat_interval(self) -> float | None:
        """The heartbeat interval in effect, in seconds, or ``None`` when disabled."""
        return self.config.heartbeat_interval

    @property
    def compression(self) -> str | None:
        """``"snappy"`` or ``"deflate"`` when the stream is compressed, else ``None``."""
        return self._codec.name if self._codec is not None else None

    @property
    def tls(self) -> bool:
        """True when the connection is encrypted."""
        return self._tls

    @property
    def socket(self) -> Any:
        """The socket (a ``gevent.ssl.SSLSocket`` under TLS), or ``None`` before
        :meth:`connect`. For inspection: reading or writing it bypasses the codec."""
        return self._sock

    @property
    def pending(self) -> int:
        """Requests written whose answer has not arrived yet."""
        return self.protocol.awaited_answers

    # -- commands ----------------------------------------------------------

    def _check_open(self) -> None:
        if self.closed:
            if self._error is not None:
                raise self._lost(self._error)
            raise ConnectionClosedError(self.name, "the connection is closed")
        if self._reader is None:
            raise ConnectionClosedError(self.name, "the connection is not connected yet")
        if self._draining:
            raise ConnectionClosedError(self.name, "the connection is closing")

    def send(self, data: bytes) -> None:
        """Queue raw command bytes; they go out with the next batch. Does not block."""
        self._check_open()
        self._queue(data)

    def _request(self, data: bytes) -> gevent.event.AsyncResult[bytes]:
        waiter: gevent.event.AsyncResult[bytes] = gevent.event.AsyncResult()
        self.protocol.await_answer(waiter)
        self._queue(data)
        return waiter

    def request(self, waiter: Waiter, data: bytes) -> None:
        """Queue a request and hand nsqd's answer to ``waiter``. Does not block.

        ``data`` must come from this connection's :attr:`protocol` (such as
        ``conn.protocol.pub(topic, body)``), which records the request so the
        answer is matched to it. Answers reach waiters in request order, in
        the reader greenlet or the hub (see :class:`Waiter`). :meth:`publish`
        and friends are this with an ``AsyncResult``; a producer passes its
        own waiter to skip a hop.
        """
        if self.closed or self._draining or self._reader is None:
            self._check_open()  # raises the error that says why
        self.protocol.await_answer(waiter)
        self._queue(data)

    def request_encoded(
        self, waiter: Waiter, command: str, data: bytes, now: bool = False
    ) -> None:
        """Queue a ``PUB``/``MPUB``/``DPUB`` built once for any connection; does not block.

        ``data`` comes from :mod:`gnsqlite.protocol.commands` (``pub``,
        ``dpub``, ``mpub_encoded``) and ``command`` names it; nsqd's answer
        goes to ``waiter`` as with :meth:`request`. ``now``: send it (and
        what is queued before it) at once, as :meth:`flush` does, rather than
        with the hub's next flush.
        """
        if self.closed or self._draining or self._reader is None:
            self._check_open()  # raises the error that says why
        self._outbox.append(self.protocol.publish_encoded(command, data, waiter))
        if now and not self._tls:  # sent at once: no hub flush scheduled to be cancelled
            self.flush()
        else:
            self._queued()  # _queue, inlined

    def publish(self, topic: str, body: bytes | str) -> gevent.event.AsyncResult[bytes]:
        """PUB; the result resolves to ``b"OK"`` or the server's error. Does not block."""
        self._check_open()
        return self._request(self.protocol.pub(topic, body))

    def multi_publish(
        self, topic: str, bodies: Iterable[bytes | str]
    ) -> gevent.event.AsyncResult[bytes]:
        """MPUB; the result resolves to ``b"OK"`` or the server's error. Does not block."""
        self._check_open()
        return self._request(self.protocol.mpub(topic, bodies))

    def deferred_publish(
        self, topic: str, delay: float, body: bytes | str
    ) -> gevent.event.AsyncResult[bytes]:
        """DPUB, delivered after ``delay`` seconds; resolves like :meth:`publish`."""
        self._check_open()
        return self._request(self.protocol.dpub(topic, delay, body))

    def subscribe(self, topic: str, channel: str, timeout: float | None = None) -> None:
        """SUB and wait for nsqd's ``OK``; blocks up to ``timeout`` seconds.

        Raises the server's error (``BadTopicError`` ...) or
        :class:`~gnsqlite.errors.NSQTimeoutError`.
        """
        self._check_open()
        waiter = self._request(self.protocol.sub(topic, channel))
        self._wait(waiter, timeout, "SUB")

    def _wait(
        self, waiter: gevent.event.AsyncResult[bytes], timeout: float | None, what: str
    ) -> Any:
        try:
            return waiter.get(timeout=timeout)
        except gevent.Timeout:
            raise NSQTimeoutError(f"{self.name}: no answer to {what} within {timeout} s") from None

    def ready(self, count: int) -> None:
        """RDY ``count``. Does not block."""
        if self.closed or self._draining or self._reader is None:
            self._check_open()  # raises the error that says why, before the protocol would
        self._queue(self.protocol.rdy(count))

    def finish(self, message_id: bytes | str, now: bool = False) -> None:
        """FIN a message. Does not block.

        ``now``: send it (and what is queued before it) at once, as
        :meth:`flush` does, rather than with the hub's next flush; for a
        caller that knows no other FIN of this turn would share the write.
        """
        if self.closed or self._draining or self._reader is None:
            self._check_open()  # raises the error that says why
        outbox = self._outbox
        outbox.append(self.protocol.fin(message_id))  # _queue, inlined: a flush is usually due
        if now and not self._tls:
            self.flush()
        elif self._tls or not self._flush_scheduled or len(outbox) >= FLUSH_AT:
            self._queued()

    def finish_many(self, message_ids: Sequence[bytes | str]) -> None:
        """FIN every one of ``message_ids``, queued as one command: one write. Does not block.

        The first id goes through the protocol's state check; the rest are
        joined without a Python step per id (:func:`~gnsqlite.protocol.commands.fin_many`).
        """
        if not message_ids:
            return
        if self.closed or self._draining or self._reader is None:
            self._check_open()  # raises the error that says why
        first = self.protocol.fin(message_ids[0])
        self._queue(first + commands.fin_many(message_ids[1:]))

    def requeue(self, message_id: bytes | str, delay: float = 0.0) -> None:
        """REQ a message, redelivered after ``delay`` seconds. Does not block."""
        self._check_open()
        self._queue(self.protocol.req(message_id, delay))

    def touch(self, message_id: bytes | str) -> None:
        """TOUCH a message to reset its timeout. Does not block."""
        self._check_open()
        self.send(self.protocol.touch(message_id))

    def nop(self) -> None:
        """NOP. Does not block."""
        self._check_open()
        self.send(self.protocol.nop())

    def start_close(self) -> None:
        """Send CLS; nsqd stops sending and answers ``CLOSE_WAIT``. Does not block.

        FIN, REQ and TOUCH remain allowed until :meth:`close`.
        """
        self._check_open()
        if self.protocol.state is ClientState.SUBSCRIBED:
            self._queue(self.protocol.cls())

    def wait_close_wait(self, timeout: float | None) -> bool:
        """Block until nsqd answered CLS; ``True`` if it did within ``timeout`` seconds."""
        return bool(self._close_wait.wait(timeout))

    # -- closing -----------------------------------------------------------

    def close(self, timeout: float | None = None) -> None:
        """Close the connection; blocks up to ``timeout`` seconds (default ``close_timeout``).

        A subscribed connection sends CLS and waits for ``CLOSE_WAIT`` first;
        commands already queued are written before the socket is shut.
        Requests still waiting for an answer fail with
        :class:`~gnsqlite.errors.ConnectionClosedError`. Afterwards no
        greenlet of this connection remains. Safe to call twice.
        """
        if self.closed:
            self._join_greenlets(timeout)
            return
        timeout = self.config.close_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        current = gevent.getcurrent()
        if self._reader is not None and current is not self._reader:
            if self.protocol.state is ClientState.SUBSCRIBED:
                self._queue(self.protocol.cls())
            if self.protocol.state is ClientState.CLOSING:
                self._close_wait.wait(max(0.0, deadline - time.monotonic()))
        writer = self._writer
        if writer is not None and current is not writer and not self.closed:
            self._draining = True
            self._wakeup.set()
            writer.join(max(0.0, deadline - time.monotonic()))
        self._end(None)
        self._join_greenlets(max(0.0, deadline - time.monotonic()))

    def _join_greenlets(self, timeout: float | None) -> None:
        current = gevent.getcurrent()
        others = [g for g in (self._reader, self._writer) if g is not None and g is not current]
        if others:
            gevent.joinall(others, timeout=timeout)

    def _end(self, error: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        self._error = error
        self._stop_watch()  # the hub reads no more, before anything else runs
        waiters = self.protocol.connection_lost()
        if error is not None:
            text = str(error)
            if not text.startswith(self.name):
                text = f"{self.name}: {text}"
            # A failed connect() raises to its caller, who decides what to log.
            log.log(
                logging.INFO if self._reader is not None else logging.DEBUG,
                "connection ended: %s",
                text,
            )
        current = gevent.getcurrent()
        for greenlet in (self._reader, self._writer):
            if greenlet is not None and greenlet is not current:
                greenlet.kill(block=False)
        failure: Exception
        if error is None:
            failure = ConnectionClosedError(self.name, "the connection was closed")
        elif isinstance(error, (ServerError, ProtocolError, NSQTimeoutError)):
            failure = self._lost(error)
        else:
            failure = error
        for waiter in waiters:
            waiter.set_exception(failure)
        self._close_wait.set()
        self._outbox.clear()
        self._unsent = b""
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(_stdlib_socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()
        if self.on_close is not None and self._reader is not None:
            self._call(self.on_close, error)

    def _lost(self, error: Exception) -> BrokenConnectionError:
        """The error for requests the connection can no longer serve, caused by ``error``."""
        failure = BrokenConnectionError(self.name, f"connection lost: {error}")
        failure.__cause__ = error
        return failure

    def join(self, timeout: float | None = None) -> bool:
        """Block until the connection's greenlets have ended; ``True`` if they have."""
        greenlets = [g for g in (self._reader, self._writer) if g is not None]
        if greenlets:
            gevent.joinall(greenlets, timeout=timeout)
        return all(g.dead for g in greenlets)
