"""Connecting a :class:`~gnsqlite.connection.Connection`: connect, IDENTIFY, upgrades, AUTH.

:meth:`Handshake.connect` blocks the calling greenlet through the whole
handshake (TCP connect, magic, IDENTIFY, TLS, snappy or deflate, AUTH) and
then starts the connection's reader and writer greenlets. What IDENTIFY
negotiated is the protocol state's (``conn.protocol.features``), read
through the connection's properties. TLS verifies the server by default
(system CAs and hostname checking); there is no plaintext fallback.

A mixin: the attributes it uses are the Connection's (see
:mod:`gnsqlite.connection`).
"""

from __future__ import annotations

import logging
import socket as _stdlib_socket
import ssl as _stdlib_ssl
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gevent
import gevent.ssl

from ..codecs import Codec, make_codec
from ..config import ConnectionConfig
from ..errors import (
    ConnectionClosedError,
    NegotiationError,
    NSQError,
    NSQTimeoutError,
    RemoteProtocolError,
    ServerError,
    WrongPortError,
    map_io_errors,
)
from ..net import connect_tcp
from ..protocol import (
    Authenticated,
    ClientConnection,
    ClientState,
    ErrorReceived,
    Event,
    Identified,
)

__all__ = ["Handshake"]

log = logging.getLogger("gnsqlite.connection")  # the connection's logger, as before the split


def _default_client_id() -> str:
    return _stdlib_socket.gethostname().split(".")[0]


class Handshake:
    """Connecting a :class:`~gnsqlite.connection.Connection`; see the module docstring."""

    name: str
    address: tuple[str, int]
    config: ConnectionConfig
    protocol: ClientConnection
    identity: dict[str, Any] | None
    last_received: float
    _sock: Any
    _codec: Codec | None
    closed: bool
    _tls: bool
    _loop: Any
    _reader: gevent.Greenlet[[], None] | None
    _writer: gevent.Greenlet[[], None] | None

    if TYPE_CHECKING:

        @property
        def features(self) -> dict[str, Any]: ...
        def _end(self, error: Exception | None) -> None: ...
        def _feed(self, data: bytes, route: Callable[[Event], None] | None = None) -> None: ...
        def _recv(self) -> bytes: ...
        def _encode(self, data: bytes) -> bytes: ...
        def _read_loop(self) -> None: ...
        def _write_loop(self) -> None: ...

    def connect(self) -> dict[str, Any]:
        """Connect and run the whole handshake; blocks until done.

        Returns the negotiated features (nsqd's IDENTIFY reply, or defaults
        such as ``max_rdy_count`` 2500 when nsqd answered a plain ``OK``).
        Raises :class:`~gnsqlite.errors.BrokenConnectionError` on network
        failure, :class:`~gnsqlite.errors.NSQTimeoutError` when the handshake
        exceeds ``connect_timeout`` seconds,
        :class:`~gnsqlite.errors.WrongPortError` when the address is an HTTP
        port (or nsqlookupd's), :class:`~gnsqlite.errors.NegotiationError` when nsqd cannot provide
        TLS or AUTH as configured or its certificate is refused, and the
        server's error (``AuthFailedError``, ``UnauthorizedError``,
        ``BadBodyError`` ...) for a refused IDENTIFY or AUTH.
        """
        if self.closed or self._reader is not None:
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
        except WrongPortError as exc:  # the decoder's words, without the address
            error = WrongPortError(f"{self.name}: {exc}")
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
        sock = self._sock = connect_tcp(self.address)
        hostname = self.config.hostname or _stdlib_socket.gethostname()
        body = self.config.identify_body(_default_client_id(), hostname)
        sock.sendall(self.protocol.start(body))
        while self.protocol.state not in (ClientState.READY, ClientState.AUTH_REQUIRED):
            for event in self._handshake_events():
                if isinstance(event, Identified):  # the protocol keeps its features
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

