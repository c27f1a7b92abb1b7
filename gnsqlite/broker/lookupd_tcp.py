"""nsqlookupd's TCP protocol, where nsqd announces itself (one session per connection).

The magic ``"  V1"``, then newline-terminated commands ``IDENTIFY`` (followed
by a 4-byte big-endian size and a JSON body), ``REGISTER topic [channel]``,
``UNREGISTER topic [channel]`` and ``PING``. Every answer is
``[4-byte size][data]``: ``OK``, the IDENTIFY JSON, or an error text such as
``E_INVALID invalid command FOO``, after which the connection is closed. When
a producer's connection closes, all its registrations vanish.

:class:`LookupdTcp` acts on the :class:`~gnsqlite.broker.lookupd_db.RegistrationDB`
below it; what it needs from the server above (its ports and names, for the
IDENTIFY answer) is the :class:`ServerInfo` protocol.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket as _stdlib_socket
import struct
from collections.abc import Callable
from typing import Any, Protocol

import gevent.socket

from ..protocol import valid_channel_name, valid_topic_name
from .lookupd_db import PeerInfo, Registration, RegistrationDB

__all__ = ["LookupdTcp", "ServerInfo"]

log = logging.getLogger(__name__)

_MAGIC_V1 = b"  V1"
_SIZE = struct.Struct(">i")
_MAX_LINE = 64 * 1024
_MAX_IDENTIFY_BODY = 1024 * 1024


class ServerInfo(Protocol):
    """What the IDENTIFY answer tells an nsqd about the lookupd server."""

    broadcast_address: str
    hostname: str
    version: str

    @property
    def tcp_port(self) -> int: ...

    @property
    def http_port(self) -> int: ...


class _ClientError(Exception):
    """A protocol error: sent to the client as ``CODE text``, then the connection closes."""

    def __init__(self, code: str, text: str) -> None:
        self.code = code
        self.text = text
        super().__init__(f"{code} {text}")


def _send(sock: gevent.socket.socket, data: bytes) -> None:
    sock.sendall(_SIZE.pack(len(data)) + data)


def _topic_channel(command: str, params: list[str]) -> tuple[str, str]:
    if not params:
        raise _ClientError("E_INVALID", f"{command} insufficient number of params")
    topic = params[0]
    channel = params[1] if len(params) >= 2 else ""
    if not valid_topic_name(topic):
        raise _ClientError("E_BAD_TOPIC", f"{command} topic name '{topic}' is not valid")
    if channel and not valid_channel_name(channel):
        raise _ClientError("E_BAD_CHANNEL", f"{command} channel name '{channel}' is not valid")
    return topic, channel


def _json_int(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("not an integer")
    return value


def _json_str(value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError("not a string")
    return value


def _peer_from_body(body: bytes, remote_address: str, now: float) -> PeerInfo:
    try:
        data = json.loads(body)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        peer = PeerInfo(
            id=remote_address,
            remote_address=remote_address,
            hostname=_json_str(data.get("hostname")),
            broadcast_address=_json_str(data.get("broadcast_address")),
            tcp_port=_json_int(data.get("tcp_port")),
            http_port=_json_int(data.get("http_port")),
            version=_json_str(data.get("version")),
            last_update=now,
        )
    except ValueError as exc:
        raise _ClientError("E_BAD_BODY", "IDENTIFY failed to decode JSON body") from exc
    if not (peer.broadcast_address and peer.tcp_port and peer.http_port and peer.version):
        raise _ClientError("E_BAD_BODY", "IDENTIFY missing fields")
    return peer


class LookupdTcp:
    """The TCP sessions of one lookupd: :meth:`handle` serves one connection.

    ``clock`` returns seconds (``time.monotonic``). :meth:`close_connections`
    closes every open connection (the server's stop).
    """

    def __init__(self, db: RegistrationDB, server: ServerInfo, clock: Callable[[], float]) -> None:
        self.db = db
        self._server = server
        self._clock = clock
        self._sockets: set[gevent.socket.socket] = set()

    # read from the server on each use: it learns its ports (and may be retuned) after this
    @property
    def tcp_port(self) -> int:
        return self._server.tcp_port

    @property
    def http_port(self) -> int:
        return self._server.http_port

    @property
    def version(self) -> str:
        return self._server.version

    @property
    def broadcast_address(self) -> str:
        return self._server.broadcast_address

    @property
    def hostname(self) -> str:
        return self._server.hostname

    def close_connections(self) -> None:
        """Shut down and close every open connection; never blocks."""
        for sock in list(self._sockets):
            _close_quietly(sock)

    def handle(self, sock: gevent.socket.socket, address: tuple[Any, ...]) -> None:
        """Serve one nsqd connection until it closes; blocks (the server's greenlet)."""
        remote = _format_remote(address)
        self._sockets.add(sock)
        peer: PeerInfo | None = None
        rfile = sock.makefile("rb")
        try:
            magic = rfile.read(4)
            if magic != _MAGIC_V1:
                if len(magic) == 4:
                    log.warning("client(%s) bad protocol magic %r", remote, magic)
                    _send(sock, b"E_BAD_PROTOCOL")
                return
            while True:
                line = rfile.readline(_MAX_LINE)
                if not line.endswith(b"\n"):
                    break
                params = line.decode("utf-8", "replace").strip().split(" ")
                try:
                    response, peer = self._exec(params, peer, rfile, remote)
                except _ClientError as exc:
                    log.info("client(%s) error: %s", remote, exc)
                    _send(sock, str(exc).encode())
                    break
                _send(sock, response)
        except (OSError, ValueError) as exc:
            log.debug("client(%s) connection error: %s", remote, exc)
        finally:
            self._sockets.discard(sock)
            rfile.close()
            _close_quietly(sock)
            if peer is not None:
                self._forget(peer)

    def _forget(self, peer: PeerInfo) -> None:
        for key in self.db.lookup_registrations(peer.id):
            self.db.remove_producer(key, peer.id)
            log.info("DB: client(%s) UNREGISTER %s %s %s", peer.id, *_key_text(key))

    def _exec(
        self, params: list[str], peer: PeerInfo | None, rfile: Any, remote: str
    ) -> tuple[bytes, PeerInfo | None]:
        command, args = params[0], params[1:]
        if command == "PING":
            if peer is not None:
                peer.last_update = self._clock()
            return b"OK", peer
        if command == "IDENTIFY":
            return self._identify(peer, rfile, remote)
        if command in ("REGISTER", "UNREGISTER"):
            if peer is None:
                raise _ClientError("E_INVALID", "client must IDENTIFY")
            topic, channel = _topic_channel(command, args)
            if command == "REGISTER":
                self._register(peer, topic, channel)
            else:
                self._unregister(peer, topic, channel)
            return b"OK", peer
        raise _ClientError("E_INVALID", f"invalid command {command}")

    def _identify(
        self, peer: PeerInfo | None, rfile: Any, remote: str
    ) -> tuple[bytes, PeerInfo | None]:
        if peer is not None:
            raise _ClientError("E_INVALID", "cannot IDENTIFY again")
        size_bytes = rfile.read(4)
        if len(size_bytes) != 4:
            raise _ClientError("E_BAD_BODY", "IDENTIFY failed to read body size")
        (size,) = _SIZE.unpack(size_bytes)
        if not 0 <= size <= _MAX_IDENTIFY_BODY:
            raise _ClientError("E_BAD_BODY", f"IDENTIFY invalid body size {size}")
        body = rfile.read(size)
        if len(body) != size:
            raise _ClientError("E_BAD_BODY", "IDENTIFY failed to read body")
        peer = _peer_from_body(body, remote, self._clock())
        log.info(
            "CLIENT(%s): IDENTIFY Address:%s TCP:%d HTTP:%d Version:%s",
            remote,
            peer.broadcast_address,
            peer.tcp_port,
            peer.http_port,
            peer.version,
        )
        self.db.add_producer(Registration("client", "", ""), peer)
        response = {
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": self.version,
            "broadcast_address": self.broadcast_address,
            "hostname": self.hostname,
        }
        return json.dumps(response).encode(), peer

    def _register(self, peer: PeerInfo, topic: str, channel: str) -> None:
        if channel:
            self.db.add_producer(Registration("channel", topic, channel), peer)
        self.db.add_producer(Registration("topic", topic, ""), peer)
        log.info("DB: client(%s) REGISTER topic:%s channel:%s", peer.id, topic, channel)

    def _unregister(self, peer: PeerInfo, topic: str, channel: str) -> None:
        if channel:
            key = Registration("channel", topic, channel)
            _, left = self.db.remove_producer(key, peer.id)
            if left == 0 and channel.endswith("#ephemeral"):
                self.db.remove_registration(key)
        else:
            # a topic unregistration also drops that producer's channels of the topic
            for key in self.db.find_registrations("channel", topic, "*"):
                self.db.remove_producer(key, peer.id)
            key = Registration("topic", topic, "")
            _, left = self.db.remove_producer(key, peer.id)
            if left == 0 and topic.endswith("#ephemeral"):
                self.db.remove_registration(key)
        log.info("DB: client(%s) UNREGISTER topic:%s channel:%s", peer.id, topic, channel)


def _key_text(key: Registration) -> tuple[str, str, str]:
    return key.category, key.key, key.subkey


def _format_remote(address: tuple[Any, ...]) -> str:
    host, port = str(address[0]), int(address[1])
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _close_quietly(sock: gevent.socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(_stdlib_socket.SHUT_RDWR)
    sock.close()
