"""One connection to nsqd: the protocol state machine over a gevent socket.

:meth:`Connection.connect` blocks the calling greenlet through the whole
handshake (TCP connect, magic, IDENTIFY, TLS, snappy or deflate, AUTH), then
starts the connection's two greenlets:

* the **reader** reads, decodes and routes frames: messages go to the
  ``on_message`` callback (which must not block), answers to requests resolve
  their :class:`~gevent.event.AsyncResult` in the order the requests were
  written, heartbeats are answered with ``NOP`` at once;
* the **writer** greenlet takes over writing when the socket is full (it
  waits until nsqd reads) and on TLS connections.

Commands are written in batches: the first command queued in a turn of the
event loop schedules one flush, a callback the hub runs before it next polls
the sockets, and that flush sends everything queued by then in one ``send``.
So commands written close together (a burst of FINs, a FIN and its RDY,
pipelined PUBs) share a syscall, a lone command (one PUB at a time,
``max_in_flight=1``) goes out without a switch to another greenlet, and
commands written by many greenlets never interleave. The flush never waits:
what the socket does not take at once is left to the writer greenlet, ahead
of anything queued later, so no caller and not the hub ever blocks on a
slow nsqd.

A connection that hears nothing for two heartbeat intervals is dead: one hub
timer per connection (re-armed lazily, not per receive) ends the reader's
receive and the connection ends with
:class:`~gnsqlite.errors.BrokenConnectionError`. Network failures surface as
:class:`~gnsqlite.errors.BrokenConnectionError` carrying the address, with
the cause chained; using a connection after :meth:`Connection.close` raises
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

import contextlib
import logging
import socket as _stdlib_socket
import ssl as _stdlib_ssl
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import gevent
import gevent.event
import gevent.socket
import gevent.ssl

from .codecs import Codec, make_codec
from .config import ConnectionConfig
from .errors import (
    BrokenConnectionError,
    ConnectionClosedError,
    NegotiationError,
    NSQError,
    NSQTimeoutError,
    ProtocolError,
    RemoteProtocolError,
    ServerError,
)
from .net import format_address, parse_address, set_nodelay
from .protocol import (
    DEFAULT_MAX_RDY_COUNT,
    Authenticated,
    ClientConnection,
    ClientState,
    CloseWait,
    ErrorReceived,
    Event,
    Heartbeat,
    Identified,
    Message,
    MessageReceived,
    Response,
    Upgraded,
)

__all__ = ["Connection", "Waiter", "format_address", "map_io_errors", "parse_address"]

log = logging.getLogger(__name__)

_RECV_SIZE = 256 * 1024
#: Plain bytes decompressed at a time before the frame decoder runs.
_DECODE_STEP = 64 * 1024
#: Commands queued in one turn of the loop after which they are sent at once
#: (about 4 KiB of FINs, as go-nsq's buffered writer sends them).
_FLUSH_AT = 200
MessageCallback = Callable[["Connection", Message], None]
ErrorCallback = Callable[["Connection", ServerError], None]
CloseCallback = Callable[["Connection", "Exception | None"], None]
HeartbeatCallback = Callable[["Connection"], None]


class Waiter(Protocol):
    """Receives nsqd's answer to one request; a ``gevent.event.AsyncResult`` is one.

    Called in the reader greenlet: it must not block.
    """

    def set(self, value: bytes) -> None:
        """nsqd answered (usually ``b"OK"``)."""
        ...

    def set_exception(self, exception: BaseException) -> None:
        """nsqd refused the request, or the connection ended before the answer."""
        ...


@contextlib.contextmanager
def map_io_errors(name: str, what: str, *kinds: type[Exception]) -> Iterator[None]:
    """Translate an I/O failure, once, at the edge (httpcore's ``map_exceptions``).

    An exception of ``kinds`` (default ``OSError``, ``ssl.SSLError`` included)
    leaves the block as :class:`~gnsqlite.errors.BrokenConnectionError`
    ``"<name>: <what>: <the error>"`` with the original as ``__cause__``. The
    library's own errors pass unchanged (some of them are ``OSError`` too).
    """
    caught = kinds or (OSError,)
    try:
        yield
    except NSQError:
        raise
    except caught as exc:
        raise BrokenConnectionError(name, f"{what}: {exc}") from exc


def _default_client_id() -> str:
    return _stdlib_socket.gethostname().split(".")[0]


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
    ) -> None:
        self.address = parse_address(address)
        self.name = format_address(self.address)
        self.config = config if config is not None else ConnectionConfig()
        self.on_message = on_message
        self.on_error = on_error
        self.on_close = on_close
        self.on_heartbeat = on_heartbeat
        self.protocol = ClientConnection(self.config.max_frame_size)
        self.features: dict[str, Any] = {}
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
        self._silence: Any = None  # the reader's liveness timer (a hub timer watcher)
        self._in_recv = False  # the reader waits in its receive (where silence may end it)
        self._tls = False
        self._draining = False  # close() asked the writer to flush and stop
        self._closed = False
        self._error: Exception | None = None

    def __repr__(self) -> str:
        return f"<Connection {self.name} {self.protocol.state.value}>"

    # -- state -------------------------------------------------------------

    @property
    def is_connected(self) -> bool:
        """True between a successful :meth:`connect` and the end of the connection."""
        return self._reader is not None and not self._closed

    @property
    def closed(self) -> bool:
        """True once the connection has ended, by :meth:`close` or by an error."""
        return self._closed

    @property
    def error(self) -> Exception | None:
        """The error that ended the connection, or ``None``."""
        return self._error

    @property
    def max_rdy_count(self) -> int:
        """The largest RDY nsqd accepts on this connection (2500 if not negotiated)."""
        return int(self.features.get("max_rdy_count", DEFAULT_MAX_RDY_COUNT))

    @property
    def msg_timeout(self) -> float:
        """nsqd's message timeout for this connection, in seconds (60 if not negotiated)."""
        return float(self.features.get("msg_timeout", 60000)) / 1000.0

    @property
    def max_msg_timeout(self) -> float:
        """How far TOUCH can extend a message, in seconds (nsqd's max_msg_timeout)."""
        return float(self.features.get("max_msg_timeout", 900000)) / 1000.0

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

    # -- handshake ---------------------------------------------------------

    def connect(self) -> dict[str, Any]:
        """Connect and run the whole handshake; blocks until done.

        Returns the negotiated features (nsqd's IDENTIFY reply, or defaults
        such as ``max_rdy_count`` 2500 when nsqd answered a plain ``OK``).
        Raises :class:`~gnsqlite.errors.BrokenConnectionError` on network
        failure, :class:`~gnsqlite.errors.NSQTimeoutError` when the handshake
        exceeds ``connect_timeout`` seconds,
        :class:`~gnsqlite.errors.NegotiationError` when nsqd cannot provide
        TLS or AUTH as configured or its certificate is refused, and the
        server's error (``AuthFailedError``, ``UnauthorizedError``,
        ``BadBodyError`` ...) for a refused IDENTIFY or AUTH.
        """
        if self._closed or self._reader is not None:
            raise ConnectionClosedError(self.name, "a Connection object connects only once")
        timeout = self.config.connect_timeout
        deadline = gevent.Timeout(timeout)
        deadline.start()
        try:
            with map_io_errors(self.name, "connect failed", OSError, ValueError):
                self._handshake()
            return self.features
        except gevent.Timeout as exc:
            if exc is not deadline:  # the caller's own timeout: leave no socket behind
                self._end(ConnectionClosedError(self.name, "connect was interrupted"))
                raise
            error: Exception = NSQTimeoutError(
                f"{self.name}: the handshake took longer than {timeout} s"
            )
            self._end(error)
            raise error from None
        except NegotiationError as exc:
            self._end(exc)
            if self.name in str(exc):
                raise
            raise NegotiationError(f"{self.name}: {exc}") from exc
        except ServerError as exc:
            self._end(exc)
            raise type(exc)(f"{exc.text} (from {self.name})", code=exc.code) from exc
        except NSQError as exc:  # BrokenConnectionError from map_io_errors included
            self._end(exc)
            raise
        except BaseException:  # GreenletExit, KeyboardInterrupt: leave no socket behind
            self._end(ConnectionClosedError(self.name, "connect was interrupted"))
            raise
        finally:
            deadline.close()

    def _handshake(self) -> None:
        sock = gevent.socket.create_connection(self.address)
        set_nodelay(sock)
        self._sock = sock
        hostname = self.config.hostname or _stdlib_socket.gethostname()
        body = self.config.identify_body(_default_client_id(), hostname)
        sock.sendall(self.protocol.start(body))
        while self.protocol.state not in (ClientState.READY, ClientState.AUTH_REQUIRED):
            for event in self._handshake_events():
                if isinstance(event, Identified):
                    self.features = event.features
                    self._check_compression(event)
                elif isinstance(event, ErrorReceived):
                    raise event.error
            upgrade = self.protocol.pending_upgrade
            if upgrade is not None:
                self._upgrade(upgrade)
        if self.protocol.state is ClientState.AUTH_REQUIRED:
            self._authenticate()
        elif self.config.auth_secret is not None:
            log.warning("%s: auth_secret set but nsqd does not require AUTH; not sent", self.name)
        self._sock.settimeout(None)  # the reader bounds its own waits; writes may be long
        self.last_received = time.monotonic()
        self._loop = gevent.get_hub().loop
        self._reader = gevent.spawn(self._read_loop)
        self._writer = gevent.spawn(self._write_loop)

    def _check_compression(self, event: Identified) -> None:
        for kind in ("snappy", "deflate"):
            if getattr(self.config, kind) and kind not in event.upgrades:
                log.warning("%s: %s was requested but nsqd does not offer it", self.name, kind)

    def _handshake_events(self) -> list[Event]:
        events = self.protocol.events()
        while not events and self.protocol.pending_upgrade is None:
            self._feed(self._recv())
            events = self.protocol.events()
        data = self.protocol.data_to_send()
        if data:
            self._sock.sendall(self._encode(data))
        return events

    def _upgrade(self, kind: str) -> None:
        # Bytes already read past the last frame belong to the upgraded stream:
        # they are fed back through the new codec, never the old one.
        rest = self.protocol.take_unprocessed()
        if kind == "tls":
            if rest:
                raise RemoteProtocolError("nsqd sent data before the TLS handshake")
            self._sock = self._wrap_tls(self._sock)
            self._tls = True
        else:
            level = int(self.features.get("deflate_level", self.config.deflate_level))
            self._codec = make_codec(kind, level)
        self.protocol.upgrade_started()
        if rest:
            self._feed(rest)

    def _wrap_tls(self, sock: Any) -> Any:
        context = self.config.tls_context or self._build_tls_context()
        host = self.address[0]
        try:
            # gevent.ssl.SSLSocket accepts any SSLContext (a stdlib one too) and
            # keeps every operation cooperative; context.wrap_socket would not
            # when the user built the context with the stdlib ssl module.
            tls = gevent.ssl.SSLSocket(
                sock=sock,
                server_hostname=host,
                do_handshake_on_connect=False,
                _context=context,
            )
            tls.do_handshake()
        except _stdlib_ssl.SSLError as exc:
            raise NegotiationError(f"{self.name}: TLS handshake failed: {exc}") from exc
        return tls

    def _build_tls_context(self) -> _stdlib_ssl.SSLContext:
        cfg = self.config
        context: _stdlib_ssl.SSLContext = gevent.ssl.create_default_context(cafile=cfg.tls_ca_file)
        if cfg.tls_cert_file is not None:
            context.load_cert_chain(cfg.tls_cert_file, cfg.tls_key_file)
        if not cfg.tls_verify:
            context.check_hostname = False
            context.verify_mode = _stdlib_ssl.CERT_NONE
        return context

    def _authenticate(self) -> None:
        secret = self.config.auth_secret
        if secret is None:
            raise NegotiationError(
                f"{self.name}: nsqd requires AUTH (auth_required) but no auth_secret was given"
            )
        self._sock.sendall(self._encode(self.protocol.auth(secret)))
        while self.protocol.state is ClientState.AUTHENTICATING:
            for event in self._handshake_events():
                if isinstance(event, Authenticated):
                    self.identity = event.identity
                    log.debug("%s: authenticated as %r", self.name, event.identity.get("identity"))
                elif isinstance(event, ErrorReceived):
                    raise event.error

    # -- reading -----------------------------------------------------------

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

    def _start_silence_timer(self, limit: float, at_least: float = 0.0) -> None:
        """Arm the reader's liveness check: one hub timer, not one per receive.

        It fires ``limit`` seconds after the last bytes were read (re-armed
        lazily: when it fires early it sets itself for the rest, but not
        sooner than ``at_least`` seconds), and ends a silent connection by
        raising in the reader's receive.
        """
        silent = time.monotonic() - self.last_received
        timer = self._silence = self._loop.timer(max(at_least, limit - silent))
        timer.start(self._silence_check, limit)

    def _stop_silence_timer(self) -> None:
        timer, self._silence = self._silence, None
        if timer is not None:
            timer.close()

    def _silence_check(self, limit: float) -> None:
        """Runs in the hub when the silence timer fires."""
        self._stop_silence_timer()
        reader = self._reader
        if self._closed or reader is None or reader.dead:
            return
        if time.monotonic() - self.last_received < limit:
            self._start_silence_timer(limit)  # bytes came since it was armed
            return
        if not self._in_recv:  # silent, but the reader is busy (a slow callback): look again
            self._start_silence_timer(limit, at_least=limit / 8)
            return
        reader.throw(
            BrokenConnectionError(
                self.name,
                f"nothing heard for two heartbeat intervals"
                f" ({self.config.heartbeat_interval} s each): the connection is dead",
            )
        )

    def _read_loop(self) -> None:
        error: Exception | None = None
        interval = self.config.heartbeat_interval
        try:
            # Two heartbeat intervals without a byte mean the connection is dead.
            if interval is not None:
                self._start_silence_timer(2 * interval)
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
            with map_io_errors(self.name, "read failed"):
                while True:
                    self._in_recv = True
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
                    for event in protocol.events():
                        kind = type(event)
                        if kind is MessageReceived and self.on_message is not None:
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
            self._stop_silence_timer()
        if not self._closed:
            self._end(error)

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

    # -- writing -----------------------------------------------------------

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
        if not outbox or self._closed:
            return
        if self._writing or self._unsent or self._draining:
            self._wakeup.set()  # the writer is busy or finishing: order is its job
            return
        try:
            data = self._encode(outbox[0] if len(outbox) == 1 else b"".join(outbox))
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
            if not self._closed:
                self._end(exc)
        except gevent.GreenletExit:
            return

    def _check_open(self) -> None:
        if self._closed:
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
        the reader greenlet. :meth:`publish` and friends are this with an
        ``AsyncResult``; a producer passes its own waiter to skip a hop.
        """
        if self._closed or self._draining or self._reader is None:
            self._check_open()  # raises the error that says why
        self.protocol.await_answer(waiter)
        self._queue(data)

    def request_encoded(self, waiter: Waiter, command: str, data: bytes) -> None:
        """Queue a ``PUB``/``MPUB``/``DPUB`` built once for any connection; does not block.

        ``data`` comes from :mod:`gnsqlite.protocol.commands` (``pub``,
        ``dpub``, ``mpub_encoded``) and ``command`` names it; nsqd's answer
        goes to ``waiter`` as with :meth:`request`.
        """
        if self._closed or self._draining or self._reader is None:
            self._check_open()  # raises the error that says why
        self._outbox.append(self.protocol.publish_encoded(command, data, waiter))
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
        if self._closed or self._draining or self._reader is None:
            self._check_open()  # raises the error that says why, before the protocol would
        self._queue(self.protocol.rdy(count))

    def finish(self, message_id: bytes | str) -> None:
        """FIN a message. Does not block."""
        if self._closed or self._draining or self._reader is None:
            self._check_open()  # raises the error that says why
        outbox = self._outbox
        outbox.append(self.protocol.fin(message_id))  # _queue, inlined: a flush is usually due
        if self._tls or not self._flush_scheduled or len(outbox) >= _FLUSH_AT:
            self._queued()

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

    # -- liveness and closing ----------------------------------------------

    def check_alive(self, now: float | None = None) -> bool:
        """Close the connection if it heard nothing for two heartbeat intervals.

        Returns whether the connection is still alive. ``now`` is a
        ``time.monotonic()`` value. The reader enforces the same rule by
        itself (its receive times out); this lets an owner check sooner.
        """
        if self._closed:
            return False
        interval = self.config.heartbeat_interval
        if interval is None or self._reader is None:
            return True
        now = time.monotonic() if now is None else now
        silent = now - self.last_received
        if silent > 2 * interval:
            self._end(
                BrokenConnectionError(
                    self.name, f"no data for {silent:.1f} s: missed two heartbeats of {interval} s"
                )
            )
            return False
        return True

    def close(self, timeout: float | None = None) -> None:
        """Close the connection; blocks up to ``timeout`` seconds (default ``close_timeout``).

        A subscribed connection sends CLS and waits for ``CLOSE_WAIT`` first;
        commands already queued are written before the socket is shut.
        Requests still waiting for an answer fail with
        :class:`~gnsqlite.errors.ConnectionClosedError`. Afterwards no
        greenlet of this connection remains. Safe to call twice.
        """
        if self._closed:
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
        if writer is not None and current is not writer and not self._closed:
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
        if self._closed:
            return
        self._closed = True
        self._error = error
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
