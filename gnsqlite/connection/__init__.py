"""One connection to nsqd: the protocol state machine over a stream, and the objects it holds.

:meth:`Connection.connect` blocks the calling greenlet through the whole
handshake, then starts the connection's reader and writer. A
:class:`Connection` holds, over the pure
:class:`~gnsqlite.protocol.ClientConnection`:

* the stream (:mod:`gnsqlite.connection.stream`: a socket, or in tests a
  :class:`~gnsqlite.connection.stream.MemoryStream`), opened by the
  handshake (:func:`gnsqlite.connection.handshake.open_stream`: connect,
  IDENTIFY, TLS, snappy or deflate, AUTH);
* a :class:`~gnsqlite.connection.reader.ConnectionReader`: the reader greenlet
  (messages to ``on_message``, which must not block; answers to their
  waiters in request order; heartbeats answered with ``NOP``; the hub reads
  for it where it can), the one routing rule and the one liveness rule
  (dead after two heartbeat intervals of silence);
* a :class:`~gnsqlite.connection.writer.ConnectionWriter`: commands written in
  batches, one flush a turn of the hub, and the writer greenlet for what
  the socket does not take at once (and for TLS).

This module keeps the commands and closing. Network failures surface as
:class:`~gnsqlite.errors.BrokenConnectionError` carrying the address, with
the cause chained (translated once, by :func:`~gnsqlite.errors.map_io_errors`);
using a connection after :meth:`Connection.close` raises
:class:`~gnsqlite.errors.ConnectionClosedError`.

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

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import gevent
import gevent.event

from .._mypyc import mypyc_attr
from ..config import ConnectionConfig
from ..errors import (
    BrokenConnectionError,
    ConnectionClosedError,
    NSQTimeoutError,
    ProtocolError,
    ServerError,
)
from ..net import format_address, parse_address
from ..protocol import ClientConnection, ClientState, MessageFields, commands
from ..protocol.commands import Body
from .handshake import open_stream
from .reader import ConnectionReader
from .stream import SocketStream, Stream
from .writer import FLUSH_AT, ConnectionWriter

__all__ = ["AnswerWaiter", "Connection"]

log = logging.getLogger(__name__)

MessageCallback = Callable[["Connection", Any], None]  # a Message, or the message_class
ErrorCallback = Callable[["Connection", ServerError], None]
CloseCallback = Callable[["Connection", "Exception | None"], None]
HeartbeatCallback = Callable[["Connection"], None]


class AnswerWaiter(Protocol):
    """What receives nsqd's answer to one request: the two calls the reader makes.

    A type, not a class beside gevent's: a ``gevent.event.AsyncResult`` is
    one (and :meth:`Connection.publish` uses it), but a producer's publish
    attempt answers itself through these two calls, without an
    ``AsyncResult`` per publish; gevent's own ``gevent.hub.Waiter`` has
    ``switch``/``throw`` instead and serves one greenlet only.

    Called in the reader greenlet, or in the hub itself on a connection
    without ``on_message`` (see :mod:`gnsqlite.connection.reader`): it must
    not block (in the hub, blocking raises and ends the connection).
    """

    def set(self, value: bytes) -> None:
        """nsqd answered (usually ``b"OK"``)."""
        ...

    def set_exception(self, exception: BaseException) -> None:
        """nsqd refused the request, or the connection ended before the answer."""
        ...


@mypyc_attr(allow_interpreted_subclasses=True)  # the compiled build: a subclass may refuse
class Connection:
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
    ``message_class`` (a :class:`~gnsqlite.protocol.MessageFields` subclass:
    a :class:`~gnsqlite.protocol.Delivery` subclass, or the consumer's
    :class:`~gnsqlite.message.Message`): ``on_message`` gets each message as
    an instance of it (built by the frame decoder, see
    :class:`~gnsqlite.protocol.Delivery`) rather than a
    :class:`~gnsqlite.protocol.WireMessage`; ``bytes``: each message as its
    frame's data, undecoded (see :class:`~gnsqlite.protocol.ClientConnection`).
    With either, on a plain TCP connection
    without compression it is called by the hub itself, which reads the
    socket (see :mod:`gnsqlite.connection.reader`): blocking in it raises.
    ``connect_stream(address)`` opens the stream the handshake runs over
    (a TCP connection by default; a test may hand in a
    :class:`~gnsqlite.connection.stream.MemoryStream`).

    The constructor opens no socket and starts no greenlet.
    """

    def __init__(
        self,
        address: str | tuple[str, int],
        config: ConnectionConfig | None = None,
        *,
        on_message: MessageCallback | None = None,
        on_error: ErrorCallback | None = None,
        on_close: CloseCallback | None = None,
        on_heartbeat: HeartbeatCallback | None = None,
        message_class: type[MessageFields] | type[bytes] | None = None,
        connect_stream: Callable[[tuple[str, int]], Stream] | None = None,
    ) -> None:
        self.address = parse_address(address)
        self.name = format_address(self.address)
        self.config = config if config is not None else ConnectionConfig()
        self.on_close = on_close
        self.protocol = ClientConnection(self.config.max_frame_size, message_class)
        #: nsqd's AUTH reply, or ``None`` (no AUTH, or not connected yet).
        self.identity: dict[str, Any] | None = None
        #: ``time.monotonic()`` of the last bytes read (written by the reader).
        self.last_received = 0.0
        #: The stream to nsqd, or ``None`` before :meth:`connect` and after the end.
        self.stream: Stream | None = None
        self.writer = ConnectionWriter(self.name, self._end)
        self.reader = ConnectionReader(
            self,
            self.protocol,
            heartbeat_interval=self.config.heartbeat_interval,
            queue=self.writer.queue,
            on_end=self._end,
            on_message=on_message,
            on_error=on_error,
            on_heartbeat=on_heartbeat,
        )
        self._connect_stream = connect_stream or SocketStream.connect
        self._compression: str | None = None
        self._error: Exception | None = None
        #: Connected, not closing, not closed: commands may be queued (one read per command).
        self._usable = False
        #: True once the connection has ended, by :meth:`close` or by an error.
        #: Read it; only the connection sets it (a plain attribute: read per message).
        self.closed = False

    def __repr__(self) -> str:
        return f"<Connection {self.name} {self.protocol.state.value}>"

    # -- state -------------------------------------------------------------

    @property
    def is_connected(self) -> bool:
        """True between a successful :meth:`connect` and the end of the connection."""
        return self.reader.greenlet is not None and not self.closed

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
        return self._compression

    @property
    def tls(self) -> bool:
        """True when the connection is encrypted."""
        return self.writer.tls

    @property
    def socket(self) -> Any:
        """The socket (a ``gevent.ssl.SSLSocket`` under TLS), or ``None`` before
        :meth:`connect`. For inspection: reading or writing it bypasses the codec."""
        return getattr(self.stream, "socket", None)

    @property
    def pending(self) -> int:
        """Requests written whose answer has not arrived yet."""
        return self.protocol.awaited_answers

    # -- connecting ----------------------------------------------------------

    def connect(self) -> dict[str, Any]:
        """Connect and run the whole handshake; blocks until done (up to ``connect_timeout``).

        Returns the negotiated features (nsqd's IDENTIFY reply, or defaults
        such as ``max_rdy_count`` 2500 when nsqd answered a plain ``OK``).
        Raises what :func:`~gnsqlite.connection.handshake.open_stream` says
        (``BrokenConnectionError``, ``NSQTimeoutError``, ``WrongPortError``,
        ``NegotiationError``, the server's error for a refused IDENTIFY or
        AUTH), and :class:`~gnsqlite.errors.ConnectionClosedError` when
        called twice.
        """
        if self.closed or self.reader.greenlet is not None:
            raise ConnectionClosedError(self.name, "a Connection object connects only once")
        try:
            done = open_stream(
                self.address, self.config, self.protocol, self.name, self._connect_stream
            )
        except Exception as exc:
            self._end(exc)
            raise
        except BaseException:  # GreenletExit, the caller's Timeout: leave no socket behind
            self._end(ConnectionClosedError(self.name, "connect was interrupted"))
            raise
        self.stream = done.stream
        self.identity = done.identity
        self._compression = done.codec.name if done.codec is not None else None
        self.writer.start(done.stream, done.codec)
        self.reader.start(done.stream, done.codec)
        self._usable = True
        return self.features

    # -- commands ----------------------------------------------------------

    def _check_open(self) -> None:
        if self.closed:
            if self._error is not None:
                raise self._lost(self._error)
            raise ConnectionClosedError(self.name, "the connection is closed")
        if self.reader.greenlet is None:
            raise ConnectionClosedError(self.name, "the connection is not connected yet")
        if self.writer.draining:
            raise ConnectionClosedError(self.name, "the connection is closing")

    def send(self, data: bytes) -> None:
        """Queue raw command bytes; they go out with the next batch. Does not block."""
        if not self._usable:
            self._check_open()
        self.writer.queue(data)

    def _request(self, data: bytes) -> gevent.event.AsyncResult[bytes]:
        waiter: gevent.event.AsyncResult[bytes] = gevent.event.AsyncResult()
        self.protocol.await_answer(waiter)
        self.writer.queue(data)
        return waiter

    def request(self, waiter: AnswerWaiter, data: bytes) -> None:
        """Queue a request and hand nsqd's answer to ``waiter``. Does not block.

        ``data`` must come from this connection's :attr:`protocol` (such as
        ``conn.protocol.pub(topic, body)``), which records the request so the
        answer is matched to it. Answers reach waiters in request order, in
        the reader greenlet or the hub (see :class:`AnswerWaiter`).
        :meth:`publish` and friends are this with an ``AsyncResult``; a
        producer passes its own waiter to skip a hop.
        """
        if not self._usable:
            self._check_open()  # raises the error that says why
        self.protocol.await_answer(waiter)
        self.writer.queue(data)

    def request_encoded(
        self, waiter: AnswerWaiter, command: str, data: bytes, now: bool = False
    ) -> None:
        """Queue a ``PUB``/``MPUB``/``DPUB`` built once for any connection; does not block.

        ``data`` comes from :mod:`gnsqlite.protocol.commands` (``pub``,
        ``dpub``, ``mpub_encoded``) and ``command`` names it; nsqd's answer
        goes to ``waiter`` as with :meth:`request`. ``now``: send it (and
        what is queued before it) at once, as :meth:`flush` does, rather than
        with the hub's next flush.
        """
        if not self._usable:
            self._check_open()  # raises the error that says why
        self.writer.queue(self.protocol.publish_encoded(command, data, waiter), now)

    def publish(self, topic: str, body: Body) -> gevent.event.AsyncResult[bytes]:
        """PUB; the result resolves to ``b"OK"`` or the server's error. Does not block."""
        self._check_open()
        return self._request(self.protocol.pub(topic, body))

    def multi_publish(self, topic: str, bodies: Iterable[Body]) -> gevent.event.AsyncResult[bytes]:
        """MPUB; the result resolves to ``b"OK"`` or the server's error. Does not block."""
        self._check_open()
        return self._request(self.protocol.mpub(topic, bodies))

    def deferred_publish(
        self, topic: str, delay: float, body: Body
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
        try:
            waiter.get(timeout=timeout)
        except gevent.Timeout:
            raise NSQTimeoutError(f"{self.name}: no answer to SUB within {timeout} s") from None

    def ready(self, count: int) -> None:
        """RDY ``count``. Does not block."""
        if not self._usable:
            self._check_open()  # raises the error that says why, before the protocol would
        self.writer.queue(self.protocol.rdy(count))

    def finish(self, message_id: bytes | str, now: bool = False) -> None:
        """FIN a message. Does not block.

        ``now``: send it (and what is queued before it) at once, as
        :meth:`flush` does, rather than with the hub's next flush; for a
        caller that knows no other FIN of this turn would share the write.
        """
        if not self._usable:
            self._check_open()  # raises the error that says why
        writer = self.writer
        outbox = writer.outbox
        outbox.append(self.protocol.fin(message_id))
        # ConnectionWriter.queue, inlined (a FIN per message): the same test, checked
        # to agree with it by tests/unit/test_connection.py.
        if now or writer.tls or not writer.flush_scheduled or len(outbox) >= FLUSH_AT:
            writer.queued(now)

    def finish_many(self, message_ids: Sequence[bytes | str]) -> None:
        """FIN every one of ``message_ids``, queued as one command: one write. Does not block.

        The first id goes through the protocol's state check; the rest are
        joined without a Python step per id (:func:`~gnsqlite.protocol.commands.fin_many`).
        """
        if not message_ids:
            return
        if not self._usable:
            self._check_open()  # raises the error that says why
        first = self.protocol.fin(message_ids[0])
        self.writer.queue(first + commands.fin_many(message_ids[1:]))

    def requeue(self, message_id: bytes | str, delay: float = 0.0) -> None:
        """REQ a message, redelivered after ``delay`` seconds. Does not block."""
        self._check_open()
        self.writer.queue(self.protocol.req(message_id, delay))

    def touch(self, message_id: bytes | str) -> None:
        """TOUCH a message to reset its timeout. Does not block."""
        self._check_open()
        self.writer.queue(self.protocol.touch(message_id))

    def nop(self) -> None:
        """NOP. Does not block."""
        self._check_open()
        self.writer.queue(self.protocol.nop())

    def flush(self) -> None:
        """Send what is queued now rather than when the hub next polls. Does not block.

        See :meth:`~gnsqlite.connection.writer.ConnectionWriter.flush`.
        """
        self.writer.flush()

    def start_close(self) -> None:
        """Send CLS; nsqd stops sending and answers ``CLOSE_WAIT``. Does not block.

        FIN, REQ and TOUCH remain allowed until :meth:`close`.
        """
        self._check_open()
        if self.protocol.state is ClientState.SUBSCRIBED:
            self.writer.queue(self.protocol.cls())

    def wait_close_wait(self, timeout: float | None) -> bool:
        """Block until nsqd answered CLS; ``True`` if it did within ``timeout`` seconds."""
        return bool(self.reader.close_wait.wait(timeout))

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
        reader = self.reader.greenlet
        if reader is not None and gevent.getcurrent() is not reader:
            if self.protocol.state is ClientState.SUBSCRIBED:
                self.writer.queue(self.protocol.cls())
            if self.protocol.state is ClientState.CLOSING:
                self.reader.close_wait.wait(max(0.0, deadline - time.monotonic()))
        if not self.closed:
            self._usable = False
            self.writer.drain(max(0.0, deadline - time.monotonic()))
        self._end(None)
        self._join_greenlets(max(0.0, deadline - time.monotonic()))

    def _greenlets(self) -> list[gevent.Greenlet[[], None]]:
        return [g for g in (self.reader.greenlet, self.writer.greenlet) if g is not None]

    def _join_greenlets(self, timeout: float | None) -> None:
        current = gevent.getcurrent()
        others = [g for g in self._greenlets() if g is not current]
        if others:
            gevent.joinall(others, timeout=timeout)

    def _end(self, error: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        self._usable = False
        self._error = error
        self.reader.stop()  # the hub reads no more, before anything else runs
        waiters = self.protocol.connection_lost()
        connected = self.reader.greenlet is not None
        if error is not None:
            text = str(error)
            if not text.startswith(self.name):
                text = f"{self.name}: {text}"
            # A failed connect() raises to its caller, who decides what to log.
            log.log(logging.INFO if connected else logging.DEBUG, "connection ended: %s", text)
        self.writer.stop()
        failure: Exception
        if error is None:
            failure = ConnectionClosedError(self.name, "the connection was closed")
        elif isinstance(error, (ServerError, ProtocolError, NSQTimeoutError)):
            failure = self._lost(error)
        else:
            failure = error
        for waiter in waiters:
            waiter.set_exception(failure)
        stream, self.stream = self.stream, None
        if stream is not None:
            stream.close()
        if self.on_close is not None and connected:
            try:
                self.on_close(self, error)
            except Exception:
                log.exception("%s: callback %r failed", self.name, self.on_close)

    def _lost(self, error: Exception) -> BrokenConnectionError:
        """The error for requests the connection can no longer serve, caused by ``error``."""
        failure = BrokenConnectionError(self.name, f"connection lost: {error}")
        failure.__cause__ = error
        return failure

    def join(self, timeout: float | None = None) -> bool:
        """Block until the connection's greenlets have ended; ``True`` if they have."""
        greenlets = self._greenlets()
        if greenlets:
            gevent.joinall(greenlets, timeout=timeout)
        return all(g.dead for g in greenlets)
