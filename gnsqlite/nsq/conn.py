"""pynsq's ``AsyncConn``: one evented connection to nsqd, on gevent.

For programs that drive a connection themselves, as pynsq's Reader and
Writer do inside: ``conn.on(nsq.event.MESSAGE, ...)``, ``conn.connect()``,
``conn.send(nsq.subscribe(topic, channel))``, ``conn.send_rdy(10)``, then
``message.finish()``. Underneath is a gnsqlite
:class:`~gnsqlite.connection.Connection`, which does the whole handshake
(IDENTIFY, TLS, snappy or deflate, AUTH) in :meth:`AsyncConn.connect`'s
greenlet and answers heartbeats; the events pynsq fires along the way
(``connect``, ``identify``, ``identify_response``, ``auth``,
``auth_response``) fire in the same order once it is done, then ``ready``.

After that, each frame from nsqd is an event: ``message`` (a
:class:`~gnsqlite.nsq.Message` whose ``finish``/``requeue``/``touch`` answer
on this connection), ``response`` (``data=b"OK"`` for SUB, PUB, MPUB, DPUB),
``heartbeat``, ``error`` (an :class:`~gnsqlite.nsq.Error`) and, once,
``close``. Listeners run in the connection's reader greenlet and must not
block (spawn a greenlet for slow work). Answering a message fires
``resume`` (FIN), ``backoff`` or ``continue`` (REQ), as pynsq does.
"""

from __future__ import annotations

import logging
import socket as _stdlib_socket
import time
from typing import Any

import gevent

from .._version import __version__
from ..connection import Connection
from ..errors import NSQError, ServerError
from ..protocol import WireMessage as _Wire
from ..protocol import defaults
from . import event, tornado_bridge
from .deflate_socket import DeflateEncoder, DeflateSocket
from .errors import (
    ArgumentError,
    ConnectionClosedError,
    Error,
    SendError,
    as_nsq_error,
    pynsq_arguments,
)
from .event import EventedMixin
from .message import Message
from .options import connection_config
from .snappy_socket import SnappyEncoder, SnappySocket

__all__ = [
    "CONNECTED",
    "DeflateEncoder",
    "DeflateSocket",
    "SnappyEncoder",
    "SnappySocket",
    "CONNECTING",
    "DEFAULT_USER_AGENT",
    "DISCONNECTED",
    "INIT",
    "AsyncConn",
    "DefaultEncoder",
]

log = logging.getLogger(__name__)
logger = log  # pynsq's name

INIT = "INIT"
DISCONNECTED = "DISCONNECTED"
CONNECTING = "CONNECTING"
CONNECTED = "CONNECTED"
DEFAULT_USER_AGENT = f"gnsqlite/{__version__} (pynsq drop-in)"


class DefaultEncoder:
    """pynsq's pass-through encoder: compression happens inside the Connection here."""

    @staticmethod
    def encode(data: bytes) -> bytes:
        return data


class _Answer:
    """Receives nsqd's answer to one SUB/PUB/MPUB/DPUB and fires it as an event."""

    __slots__ = ("conn",)

    def __init__(self, conn: AsyncConn) -> None:
        self.conn = conn

    def set(self, value: bytes) -> None:
        self.conn.trigger(event.RESPONSE, conn=self.conn, data=value)

    def set_exception(self, exception: BaseException) -> None:
        self.conn.trigger(event.ERROR, conn=self.conn, error=as_nsq_error(exception))


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ArgumentError(f"AsyncConn: {message}")


class AsyncConn(EventedMixin):
    """A connection to the nsqd at ``host:port``; see the module docstring.

    The keywords are pynsq's, in pynsq's units: ``timeout`` and
    ``heartbeat_interval`` and ``msg_timeout`` in seconds,
    ``output_buffer_timeout`` in milliseconds; ``requeue_delay`` (seconds,
    times the attempts) is the delay of a requeue that names none. The
    constructor opens nothing.
    """

    def __init__(
        self,
        host: str,
        port: int,
        timeout: float = 1.0,
        heartbeat_interval: int = round(defaults.HEARTBEAT_INTERVAL),
        requeue_delay: int = 90,
        tls_v1: bool = False,
        tls_options: dict[str, Any] | None = None,
        snappy: bool = False,
        deflate: bool = False,
        deflate_level: int = 6,
        user_agent: str = DEFAULT_USER_AGENT,
        output_buffer_size: int = defaults.OUTPUT_BUFFER_SIZE,
        output_buffer_timeout: int = round(defaults.OUTPUT_BUFFER_TIMEOUT * 1000),
        sample_rate: int = 0,
        auth_secret: bytes | str | None = None,
        msg_timeout: float | None = None,
        hostname: str | None = None,
    ) -> None:
        super().__init__()
        _check(isinstance(host, str), f"host must be a str, not {host!r}")
        _check(isinstance(port, int) and not isinstance(port, bool), f"port must be int: {port!r}")
        _check(
            isinstance(requeue_delay, (int, float)) and requeue_delay >= 0,
            f"requeue_delay must be 0 or more seconds, not {requeue_delay!r}",
        )
        self.state = INIT
        self.host = host
        self.port = port
        self.timeout = timeout
        self.requeue_delay = requeue_delay
        self.tls_v1 = tls_v1
        self.tls_options = tls_options
        self.snappy = snappy
        self.deflate = deflate
        self.deflate_level = deflate_level
        self.hostname = hostname or _stdlib_socket.gethostname()
        self.short_hostname = self.hostname.split(".")[0]
        #: milliseconds, as in pynsq
        self.heartbeat_interval = heartbeat_interval * 1000
        self.msg_timeout = int(msg_timeout * 1000) if msg_timeout else None
        self.output_buffer_size = output_buffer_size
        self.output_buffer_timeout = output_buffer_timeout
        self.sample_rate = sample_rate
        self.user_agent = user_agent
        self.auth_secret = auth_secret.encode() if isinstance(auth_secret, str) else auth_secret
        self.last_recv_timestamp = time.time()
        self.last_msg_timestamp = time.time()
        self.in_flight = 0
        self.rdy = 0
        self.last_rdy = 0
        self.max_rdy_count = defaults.MAX_RDY_COUNT  # until IDENTIFY says otherwise
        self.callback_queue: list[Any] = []
        self.encoder = DefaultEncoder()
        keywords = {
            "timeout": timeout,
            "heartbeat_interval": heartbeat_interval,
            "tls_v1": tls_v1,
            "tls_options": tls_options,
            "snappy": snappy,
            "deflate": deflate,
            "deflate_level": deflate_level,
            "user_agent": user_agent,
            "output_buffer_size": output_buffer_size,
            "output_buffer_timeout": output_buffer_timeout,
            "sample_rate": sample_rate,
            "auth_secret": auth_secret,
            "msg_timeout": msg_timeout,
            "hostname": self.hostname,
        }
        with pynsq_arguments("AsyncConn"):
            self.config = connection_config(keywords)
        #: The gnsqlite connection underneath, once :meth:`connect` ran.
        self.connection: Connection | None = None

    @property
    def id(self) -> str:
        """``"host:port"``."""
        return str(self)

    @property
    def socket(self) -> Any:
        """The connection's socket (TLS-wrapped under TLS), in a
        :class:`SnappySocket` or :class:`DeflateSocket` view when compressed;
        ``None`` before :meth:`connect` connected."""
        connection = self.connection
        if connection is None or connection.socket is None:
            return None
        views = {"snappy": SnappySocket, "deflate": DeflateSocket}
        view = views.get(connection.compression or "")
        return view(connection.socket) if view is not None else connection.socket

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    def connected(self) -> bool:
        """Whether the handshake is done and the connection is up."""
        return self.state == CONNECTED

    def connecting(self) -> bool:
        """Whether :meth:`connect` is under way."""
        return self.state == CONNECTING

    def closed(self) -> bool:
        """Whether the connection is not (or no longer) up."""
        return self.state in (INIT, DISCONNECTED)

    # -- connecting --------------------------------------------------------

    def connect(self) -> None:
        """Connect and run the handshake in a new greenlet. Does not block.

        When the program runs tornado's IOLoop itself, that loop gives the
        greenlet its turns (see :mod:`gnsqlite.nsq.tornado_bridge`).
        """
        if not self.closed():
            return
        self.state = CONNECTING
        gevent.spawn(self._connect)
        tornado_bridge.schedule_start()  # a program on tornado's loop lets the greenlet run

    def _connect(self) -> None:
        connection = Connection(
            (self.host, self.port),
            self.config,
            on_message=self._on_message,
            on_error=self._on_error,
            on_close=self._on_close,
            on_heartbeat=self._on_heartbeat,
        )
        self.connection = connection
        try:
            features = connection.connect()
        except (NSQError, OSError) as exc:
            self.state = DISCONNECTED
            self.trigger(event.ERROR, conn=self, error=as_nsq_error(exc))
            self.trigger(event.CLOSE, conn=self)
            return
        self.state = CONNECTED
        self.last_recv_timestamp = time.time()
        self.max_rdy_count = connection.max_rdy_count
        self.trigger(event.CONNECT, conn=self)
        identify = self.config.identify_body(self.short_hostname, self.hostname)
        self.trigger(event.IDENTIFY, conn=self, data=identify)
        if features:
            self.trigger(event.IDENTIFY_RESPONSE, conn=self, data=features)
        if connection.identity is not None:
            self.trigger(event.AUTH, conn=self, data=self.auth_secret)
            self.trigger(event.AUTH_RESPONSE, conn=self, data=connection.identity)
        self.trigger(event.READY, conn=self)

    def close(self) -> None:
        """Close the connection; ``close`` fires once it is down. Does not block."""
        if self.connection is not None and not self.connection.closed:
            gevent.spawn(self.connection.close)

    # -- sending -----------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Send one command built by :mod:`gnsqlite.nsq.protocol`. Does not block.

        SUB, PUB, MPUB and DPUB get their answer as a ``response`` (or
        ``error``) event. IDENTIFY and AUTH belong to the handshake, which
        :meth:`connect` does: sending them raises ``ValueError``. Raises
        :class:`~gnsqlite.nsq.SendError` when the connection is not up.
        """
        connection = self.connection
        if connection is None or not self.connected():
            raise SendError("the connection is not connected", None)
        line = bytes(data).partition(b"\n")[0]
        command, *params = line.split(b" ")
        try:
            if command in (b"PUB", b"MPUB", b"DPUB"):
                connection.request_encoded(_Answer(self), command.decode(), bytes(data))
            elif command == b"SUB" and len(params) == 2:
                topic, channel = (p.decode() for p in params)
                connection.request(_Answer(self), connection.protocol.sub(topic, channel))
            elif command == b"RDY" and len(params) == 1:
                connection.ready(int(params[0]))
            elif command == b"FIN" and len(params) == 1:
                connection.finish(params[0])
            elif command == b"REQ" and len(params) == 2:
                connection.requeue(params[0], int(params[1]) / 1000.0)
            elif command == b"TOUCH" and len(params) == 1:
                connection.touch(params[0])
            elif command == b"NOP":
                connection.nop()
            elif command == b"CLS":
                connection.start_close()
            else:
                raise ValueError(
                    f"AsyncConn.send: cannot send {line[:40]!r}: connect() does IDENTIFY and AUTH;"
                    " send SUB, PUB, MPUB, DPUB, RDY, FIN, REQ, TOUCH, NOP or CLS"
                )
        except ServerError:
            raise
        except NSQError as exc:
            raise SendError(f"failed to send {command.decode(errors='replace')}", exc) from exc

    def send_rdy(self, value: int) -> bool:
        """Send ``RDY value`` unless it is the last one sent; ``False`` if that failed."""
        if self.last_rdy != value:
            try:
                self.send(b"RDY %d\n" % value)
            except Error as exc:
                self.close()
                self.trigger(event.ERROR, conn=self, error=exc)
                return False
        self.last_rdy = value
        self.rdy = value
        return True

    # -- what the Connection reports (in its reader greenlet) -------------

    def _on_message(self, connection: Connection, wire: _Wire) -> None:
        now = time.time()
        self.last_recv_timestamp = self.last_msg_timestamp = now
        self.in_flight += 1
        message = Message(bytes(wire.id), wire.body, wire.timestamp, wire.attempts)
        message.on(event.FINISH, self._on_message_finish)
        message.on(event.REQUEUE, self._on_message_requeue)
        message.on(event.TOUCH, self._on_message_touch)
        self.trigger(event.MESSAGE, conn=self, message=message)

    def _on_heartbeat(self, connection: Connection) -> None:
        self.last_recv_timestamp = time.time()
        self.trigger(event.HEARTBEAT, conn=self)

    def _on_error(self, connection: Connection, error: ServerError) -> None:
        self.trigger(event.ERROR, conn=self, error=as_nsq_error(error))

    def _on_close(self, connection: Connection, error: Exception | None) -> None:
        self.state = DISCONNECTED
        if error is not None:
            self.trigger(event.ERROR, conn=self, error=ConnectionClosedError(str(error)))
        self.trigger(event.CLOSE, conn=self)

    def _answer(self, command: bytes, what: str) -> None:
        try:
            self.send(command)
        except Error as exc:
            self.close()
            self.trigger(event.ERROR, conn=self, error=SendError(f"failed to send {what}", exc))

    def _on_message_finish(self, message: Message, **_: Any) -> None:
        self.trigger(event.RESUME, conn=self)
        self.in_flight -= 1
        self._answer(b"FIN " + message.id + b"\n", f"FIN {message.id!r}")

    def _on_message_requeue(
        self, message: Message, backoff: bool = True, time_ms: int = -1, **_: Any
    ) -> None:
        self.trigger(event.BACKOFF if backoff else event.CONTINUE, conn=self)
        self.in_flight -= 1
        if time_ms < 0:
            time_ms = int(self.requeue_delay * message.attempts * 1000)
        self._answer(b"REQ %s %d\n" % (message.id, time_ms), f"REQ {message.id!r} @ {time_ms}")

    def _on_message_touch(self, message: Message, **_: Any) -> None:
        self._answer(b"TOUCH " + message.id + b"\n", f"TOUCH {message.id!r}")
