"""Connecting: TCP connect, magic, IDENTIFY, TLS, snappy or deflate, AUTH.

:func:`handshake` runs the whole handshake over a stream and returns the
connected stream (TLS-wrapped when negotiated) with its codec;
:func:`open_stream` connects TCP first and bounds the whole by the
connect timeout, translating failures to the library's errors. What
IDENTIFY negotiated is the protocol state's (``protocol.features``). TLS
verifies the server by default (system CAs and hostname checking); there
is no plaintext fallback.
"""

from __future__ import annotations

import logging
import socket as _stdlib_socket
import ssl as _stdlib_ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent
import gevent.ssl

from ..codecs import Codec, make_codec
from ..config import ConnectionConfig
from ..errors import (
    BrokenConnectionError,
    NegotiationError,
    NSQTimeoutError,
    RemoteProtocolError,
    ServerError,
    WrongPortError,
    map_io_errors,
)
from ..protocol import (
    Authenticated,
    ClientConnection,
    ClientState,
    ErrorReceived,
    Event,
    Identified,
)
from .reader import feed_protocol
from .stream import SocketStream, Stream, read_buffer

__all__ = ["Connected", "handshake", "open_stream"]

log = logging.getLogger(__name__)


@dataclass
class Connected:
    """What a finished handshake hands the connection."""

    #: The stream to read and write from now on (TLS-wrapped when negotiated).
    stream: Stream
    #: The compression codec negotiated, or ``None``.
    codec: Codec | None
    #: nsqd's AUTH reply, or ``None`` when no AUTH was needed.
    identity: dict[str, Any] | None


def _default_client_id() -> str:
    return _stdlib_socket.gethostname().split(".")[0]


def open_stream(
    address: tuple[str, int],
    config: ConnectionConfig,
    protocol: ClientConnection,
    name: str,
    connect: Callable[[tuple[str, int]], Stream] = SocketStream.connect,
) -> Connected:
    """Connect to ``address`` and run the whole handshake; blocks up to ``connect_timeout``.

    ``connect`` opens the stream (a TCP connection by default). Raises
    :class:`~gnsqlite.errors.BrokenConnectionError` on network failure,
    :class:`~gnsqlite.errors.NSQTimeoutError` when the handshake exceeds
    ``config.connect_timeout`` seconds, :class:`~gnsqlite.errors.WrongPortError`
    when the address is an HTTP port (or nsqlookupd's),
    :class:`~gnsqlite.errors.NegotiationError` when nsqd cannot provide TLS
    or AUTH as configured or its certificate is refused, and the server's
    error (``AuthFailedError``, ``BadBodyError`` ...) for a refused IDENTIFY
    or AUTH; every message names ``name``. The stream is closed on failure.
    """
    timeout = config.connect_timeout
    deadline = gevent.Timeout(timeout)
    deadline.start()
    try:
        with map_io_errors(name, "connect failed", OSError, ValueError):
            stream = connect(address)
            return handshake(stream, protocol, config, name, address[0])
    except gevent.Timeout as exc:
        if exc is not deadline:  # the caller's own timeout
            raise
        raise NSQTimeoutError(f"{name}: the handshake took longer than {timeout} s") from None
    except WrongPortError as exc:  # the decoder's words, without the address
        raise WrongPortError(f"{name}: {exc}") from None
    except NegotiationError as exc:
        if name in str(exc):
            raise
        raise NegotiationError(f"{name}: {exc}") from exc
    except ServerError as exc:
        raise type(exc)(f"{exc.text} (from {name})", code=exc.code) from exc
    finally:
        deadline.close()


def handshake(
    stream: Stream, protocol: ClientConnection, config: ConnectionConfig, name: str, host: str
) -> Connected:
    """Magic, IDENTIFY, the upgrades nsqd agreed to, AUTH, over ``stream``; blocks.

    Returns the connected stream and codec. ``host`` is the name TLS
    verifies. Raises as :func:`open_stream` says (network errors as
    ``OSError``); the stream is closed on any failure.
    """
    steps = _Handshake(stream, protocol, config, name, host)
    try:
        steps.run()
    except BaseException:
        steps.stream.close()
        raise
    return Connected(steps.stream, steps.codec, steps.identity)


class _Handshake:
    """The state of one handshake in progress: the stream (it changes at TLS) and the codec."""

    def __init__(
        self,
        stream: Stream,
        protocol: ClientConnection,
        config: ConnectionConfig,
        name: str,
        host: str,
    ) -> None:
        self.stream = stream
        self.protocol = protocol
        self.config = config
        self.name = name
        self.host = host
        self.codec: Codec | None = None
        self.identity: dict[str, Any] | None = None

    def run(self) -> None:
        protocol, config = self.protocol, self.config
        hostname = config.hostname or _stdlib_socket.gethostname()
        body = config.identify_body(_default_client_id(), hostname)
        self.stream.sendall(protocol.start(body))
        while protocol.state not in (ClientState.READY, ClientState.AUTH_REQUIRED):
            for event in self._events():
                if isinstance(event, Identified):  # the protocol keeps its features
                    self._check_compression(event)
                elif isinstance(event, ErrorReceived):
                    raise event.error
            upgrade = protocol.pending_upgrade
            if upgrade is not None:
                self._upgrade(upgrade)
        if protocol.state is ClientState.AUTH_REQUIRED:
            self._authenticate()
        elif config.auth_secret is not None:
            log.warning("%s: auth_secret set but nsqd does not require AUTH; not sent", self.name)

    def _check_compression(self, event: Identified) -> None:
        for kind in ("snappy", "deflate"):
            if getattr(self.config, kind) and kind not in event.upgrades:
                log.warning("%s: %s was requested but nsqd does not offer it", self.name, kind)

    def _encode(self, data: bytes) -> bytes:
        return self.codec.encode(data) if self.codec is not None else data

    def _events(self) -> list[Event]:
        protocol = self.protocol
        events = protocol.events()
        view = read_buffer()
        while not events and protocol.pending_upgrade is None:
            size = self.stream.recv_into(view)
            if not size:
                raise BrokenConnectionError(self.name, "nsqd closed the connection")
            data = view[:size].tobytes()
            feed_protocol(protocol, self.codec, data, self.name)
            events = protocol.events()
        data = protocol.data_to_send()
        if data:
            self.stream.sendall(self._encode(data))
        return events

    def _upgrade(self, kind: str) -> None:
        # Bytes already read past the last frame belong to the upgraded stream:
        # they are fed back through the new codec, never the old one.
        rest = self.protocol.take_unprocessed()
        if kind == "tls":
            if rest:
                raise RemoteProtocolError("nsqd sent data before the TLS handshake")
            context = self.config.tls_context or self._tls_context()
            try:
                self.stream = self.stream.start_tls(context, self.host)
            except _stdlib_ssl.SSLError as exc:
                raise NegotiationError(f"{self.name}: TLS handshake failed: {exc}") from exc
        else:
            level = int(self.protocol.features.get("deflate_level", self.config.deflate_level))
            self.codec = make_codec(kind, level)
        self.protocol.upgrade_started()
        if rest:
            feed_protocol(self.protocol, self.codec, rest, self.name)

    def _tls_context(self) -> _stdlib_ssl.SSLContext:
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
        self.stream.sendall(self._encode(self.protocol.auth(secret)))
        while self.protocol.state is ClientState.AUTHENTICATING:
            for event in self._events():
                if isinstance(event, Authenticated):
                    self.identity = event.identity
                    log.debug("%s: authenticated as %r", self.name, event.identity.get("identity"))
                elif isinstance(event, ErrorReceived):
                    raise event.error
