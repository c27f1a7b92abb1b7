"""An nsqlookupd-compatible discovery server on gevent, for tests and demos.

It speaks both of nsqlookupd's interfaces, as v1.x does:

* **TCP** (port 4160), where nsqd announces itself: the magic ``"  V1"``, then
  newline-terminated commands ``IDENTIFY`` (followed by a 4-byte big-endian
  size and a JSON body), ``REGISTER topic [channel]``,
  ``UNREGISTER topic [channel]`` and ``PING``. Every answer is
  ``[4-byte size][data]``: ``OK``, the IDENTIFY JSON, or an error text such as
  ``E_INVALID invalid command FOO``, after which the connection is closed.
  When a producer's connection closes, all its registrations vanish.
* **HTTP** (port 4161): ``/ping``, ``/info``, ``/lookup``, ``/topics``,
  ``/channels``, ``/nodes`` and the POST actions ``/topic/create``,
  ``/topic/delete``, ``/channel/create``, ``/channel/delete`` and
  ``/topic/tombstone``, answering the v1.x JSON bodies (errors are
  ``{"message": "TOPIC_NOT_FOUND"}`` with the matching status).

:class:`Lookupd` opens no socket and starts no greenlet until :meth:`Lookupd.start`;
:meth:`Lookupd.stop` closes every connection and kills every greenlet it made.
``python -m gnsqlite.broker.lookupd`` runs one until SIGINT or SIGTERM, with
nsqlookupd's flag names.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import socket as _stdlib_socket
import struct
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import gevent
import gevent.event
import gevent.pool
import gevent.pywsgi
import gevent.server
import gevent.socket

from ..net import format_address, parse_address
from ..protocol import valid_channel_name, valid_topic_name
from .options import parse_duration

__all__ = [
    "VERSION",
    "Lookupd",
    "PeerInfo",
    "Registration",
    "RegistrationDB",
    "main",
]

log = logging.getLogger(__name__)

#: The nsqlookupd version this server reports (the same as the embedded nsqd's).
VERSION = "1.2.1"

_MAGIC_V1 = b"  V1"
_SIZE = struct.Struct(">i")
_MAX_LINE = 64 * 1024
_MAX_IDENTIFY_BODY = 1024 * 1024
_STOP_TIMEOUT = 1.0

StartResponse = Callable[..., Any]


# --------------------------------------------------------------------------
# The registration database (mirrors nsqlookupd's RegistrationDB)
# --------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Registration:
    """A key in the database: ``("client", "", "")``, ``("topic", t, "")`` or
    ``("channel", t, c)``."""

    category: str
    key: str
    subkey: str

    def matches(self, category: str, key: str, subkey: str) -> bool:
        """``"*"`` in ``key`` or ``subkey`` matches anything."""
        return (
            self.category == category
            and key in ("*", self.key)
            and subkey in ("*", self.subkey)
        )


@dataclass(eq=False)
class PeerInfo:
    """One nsqd connected over TCP; ``id`` is its remote ``host:port``.

    ``last_update`` is the clock reading of its last IDENTIFY or PING, in seconds.
    """

    id: str
    remote_address: str
    hostname: str
    broadcast_address: str
    tcp_port: int
    http_port: int
    version: str
    last_update: float = 0.0

    def as_json(self) -> dict[str, Any]:
        """The producer object of ``/lookup``."""
        return {
            "remote_address": self.remote_address,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": self.version,
        }


@dataclass(eq=False)
class _Producer:
    peer: PeerInfo
    tombstoned_at: float | None = None

    def is_tombstoned(self, now: float, lifetime: float) -> bool:
        return self.tombstoned_at is not None and now - self.tombstoned_at < lifetime


@dataclass
class RegistrationDB:
    """Registrations and the producers behind each; pure, no I/O.

    Like nsqlookupd's, keys stay when their last producer leaves (so a topic
    stays listed), except ephemeral topics and channels, which go with it.
    """

    _map: dict[Registration, dict[str, _Producer]] = field(default_factory=dict)

    def add_registration(self, key: Registration) -> None:
        """Create ``key`` with no producers if it does not exist."""
        self._map.setdefault(key, {})

    def add_producer(self, key: Registration, peer: PeerInfo) -> bool:
        """Add ``peer`` under ``key``; ``False`` if it was already there."""
        producers = self._map.setdefault(key, {})
        if peer.id in producers:
            return False
        producers[peer.id] = _Producer(peer)
        return True

    def remove_producer(self, key: Registration, peer_id: str) -> tuple[bool, int]:
        """Remove one producer; returns (whether it was there, how many are left)."""
        producers = self._map.get(key)
        if producers is None:
            return False, 0
        removed = producers.pop(peer_id, None) is not None
        return removed, len(producers)

    def remove_registration(self, key: Registration) -> None:
        """Drop ``key`` and its producers."""
        self._map.pop(key, None)

    def find_registrations(self, category: str, key: str, subkey: str) -> list[Registration]:
        """Keys matching, ``"*"`` being a wildcard, in sorted order."""
        return sorted(k for k in self._map if k.matches(category, key, subkey))

    def find_producers(self, category: str, key: str, subkey: str) -> list[_Producer]:
        """Producers under the matching keys, each peer once."""
        seen: dict[str, _Producer] = {}
        for k in self.find_registrations(category, key, subkey):
            for peer_id, producer in self._map[k].items():
                seen.setdefault(peer_id, producer)
        return list(seen.values())

    def lookup_registrations(self, peer_id: str) -> list[Registration]:
        """Every key ``peer_id`` is registered under."""
        return sorted(k for k, producers in self._map.items() if peer_id in producers)


# --------------------------------------------------------------------------
# The TCP protocol
# --------------------------------------------------------------------------


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


# --------------------------------------------------------------------------
# The HTTP API
# --------------------------------------------------------------------------


class _HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(f"{status} {message}")


_STATUS_TEXT = {
    200: "200 OK",
    400: "400 Bad Request",
    404: "404 Not Found",
    405: "405 Method Not Allowed",
    500: "500 Internal Server Error",
}


def _param(params: dict[str, list[str]], name: str, missing: str) -> str:
    values = params.get(name)
    if not values:
        raise _HTTPError(400, missing)
    return values[0]


def _topic_channel_args(params: dict[str, list[str]]) -> tuple[str, str]:
    topic = _param(params, "topic", "MISSING_ARG_TOPIC")
    if not valid_topic_name(topic):
        raise _HTTPError(400, "INVALID_ARG_TOPIC")
    channel = _param(params, "channel", "MISSING_ARG_CHANNEL")
    if not valid_channel_name(channel):
        raise _HTTPError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


# --------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------


class Lookupd:
    """An nsqlookupd: TCP for nsqd registrations, HTTP for discovery.

    Addresses are ``"host:port"``; port 0 picks a free port, and after
    :meth:`start` :attr:`tcp_address` and :attr:`http_address` hold the bound
    addresses. ``broadcast_address`` defaults to the hostname, like
    nsqlookupd's. ``inactive_producer_timeout`` (seconds, default 300) hides
    producers that have not pinged for that long; ``tombstone_lifetime``
    (seconds, default 45) is how long ``/topic/tombstone`` hides a producer.
    ``clock`` returns seconds (``time.monotonic``); tests may replace it.
    """

    def __init__(
        self,
        tcp_address: str = "127.0.0.1:4160",
        http_address: str = "127.0.0.1:4161",
        broadcast_address: str | None = None,
        inactive_producer_timeout: float = 300.0,
        tombstone_lifetime: float = 45.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        parse_address(tcp_address)
        parse_address(http_address)
        self.tcp_address = tcp_address
        self.http_address = http_address
        self.hostname = _stdlib_socket.gethostname()
        self.broadcast_address = broadcast_address or self.hostname
        self.inactive_producer_timeout = inactive_producer_timeout
        self.tombstone_lifetime = tombstone_lifetime
        self.version = VERSION
        self.db = RegistrationDB()
        self._clock = clock
        self._tcp_server: gevent.server.StreamServer | None = None
        self._http_server: gevent.pywsgi.WSGIServer | None = None
        self._tcp_pool = gevent.pool.Pool()
        self._sockets: set[gevent.socket.socket] = set()

    def __repr__(self) -> str:
        return f"<Lookupd tcp={self.tcp_address} http={self.http_address}>"

    @property
    def tcp_port(self) -> int:
        """The TCP port (the bound one after :meth:`start`)."""
        return parse_address(self.tcp_address)[1]

    @property
    def http_port(self) -> int:
        """The HTTP port (the bound one after :meth:`start`)."""
        return parse_address(self.http_address)[1]

    @property
    def started(self) -> bool:
        """Whether the server is listening."""
        return self._tcp_server is not None

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Bind both listeners and start serving; does not block.

        Raises ``OSError`` when an address cannot be bound (nothing is left open).
        """
        if self._tcp_server is not None:
            return
        tcp = gevent.server.StreamServer(
            parse_address(self.tcp_address), self._handle_tcp, spawn=self._tcp_pool
        )
        http = gevent.pywsgi.WSGIServer(
            parse_address(self.http_address), self._wsgi, log=None, error_log=log
        )
        tcp.start()
        try:
            http.start()
        except BaseException:
            tcp.stop(timeout=0)
            raise
        self._tcp_server, self._http_server = tcp, http
        tcp_bound: Any = tcp.address
        http_bound: Any = http.address
        self.tcp_address = format_address((str(tcp_bound[0]), int(tcp_bound[1])))
        self.http_address = format_address((str(http_bound[0]), int(http_bound[1])))
        log.info("nsqlookupd listening: TCP %s, HTTP %s", self.tcp_address, self.http_address)

    def stop(self) -> None:
        """Close every connection and listener; blocks up to about a second."""
        tcp, http = self._tcp_server, self._http_server
        self._tcp_server = self._http_server = None
        if tcp is None or http is None:
            return
        tcp.close()
        for sock in list(self._sockets):
            _close_quietly(sock)
        tcp.stop(timeout=_STOP_TIMEOUT)
        http.stop(timeout=_STOP_TIMEOUT)
        log.info("nsqlookupd stopped")

    def __enter__(self) -> Lookupd:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- TCP ---------------------------------------------------------------

    def _handle_tcp(self, sock: gevent.socket.socket, address: tuple[Any, ...]) -> None:
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
            remote, peer.broadcast_address, peer.tcp_port, peer.http_port, peer.version,
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

    # -- HTTP --------------------------------------------------------------

    def _active(self, producers: Iterable[_Producer], tombstone_lifetime: float) -> list[_Producer]:
        now = self._clock()
        return [
            p
            for p in producers
            if now - p.peer.last_update <= self.inactive_producer_timeout
            and not p.is_tombstoned(now, tombstone_lifetime)
        ]

    def _wsgi(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/")
        params = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        route = _ROUTES.get(path)
        body: bytes
        content_type = "application/json; charset=utf-8"
        try:
            if route is None:
                raise _HTTPError(404, "NOT_FOUND")
            allowed, handler = route
            if method != allowed:  # httprouter maps no HEAD to GET: 405 like nsqlookupd
                raise _HTTPError(405, "METHOD_NOT_ALLOWED")
            result = handler(self, params)
            status = 200
            if result is None:
                body, content_type = b"", ""
            elif isinstance(result, str):
                body, content_type = result.encode(), "text/plain; charset=utf-8"
            else:
                body = json.dumps(result).encode()
        except _HTTPError as exc:
            status = exc.status
            body = json.dumps({"message": exc.message}).encode()
        headers = [("Content-Length", str(len(body)))]
        if path != "/ping" or status != 200:  # nsqlookupd's /ping is PlainText: no such header
            headers.append(("X-NSQ-Content-Type", "nsq; version=1.0"))
        if content_type:
            headers.append(("Content-Type", content_type))
        start_response(_STATUS_TEXT.get(status, f"{status} Error"), headers)
        return [body]

    def _http_ping(self, params: dict[str, list[str]]) -> str:
        return "OK"

    def _http_info(self, params: dict[str, list[str]]) -> dict[str, Any]:
        return {"version": self.version}

    def _http_topics(self, params: dict[str, list[str]]) -> dict[str, Any]:
        return {"topics": [k.key for k in self.db.find_registrations("topic", "*", "")]}

    def _http_channels(self, params: dict[str, list[str]]) -> dict[str, Any]:
        topic = _param(params, "topic", "MISSING_ARG_TOPIC")
        keys = self.db.find_registrations("channel", topic, "*")
        return {"channels": [k.subkey for k in keys]}

    def _http_lookup(self, params: dict[str, list[str]]) -> dict[str, Any]:
        topic = _param(params, "topic", "MISSING_ARG_TOPIC")
        if not self.db.find_registrations("topic", topic, ""):
            raise _HTTPError(404, "TOPIC_NOT_FOUND")
        channels = [k.subkey for k in self.db.find_registrations("channel", topic, "*")]
        producers = self._active(
            self.db.find_producers("topic", topic, ""), self.tombstone_lifetime
        )
        return {"channels": channels, "producers": [p.peer.as_json() for p in producers]}

    def _http_nodes(self, params: dict[str, list[str]]) -> dict[str, Any]:
        nodes = []
        for client in self._active(self.db.find_producers("client", "", ""), 0.0):
            peer = client.peer
            topics = [
                k.key
                for k in self.db.lookup_registrations(peer.id)
                if k.matches("topic", "*", "")
            ]
            now = self._clock()
            tombstones = []
            for topic in topics:
                producer = next(
                    (p for p in self.db.find_producers("topic", topic, "") if p.peer is peer),
                    None,
                )
                tombstones.append(
                    producer is not None and producer.is_tombstoned(now, self.tombstone_lifetime)
                )
            node = peer.as_json()
            node["tombstones"] = tombstones
            node["topics"] = topics
            nodes.append(node)
        return {"producers": nodes}

    def _http_topic_create(self, params: dict[str, list[str]]) -> None:
        topic = _param(params, "topic", "MISSING_ARG_TOPIC")
        if not valid_topic_name(topic):
            raise _HTTPError(400, "INVALID_ARG_TOPIC")
        self.db.add_registration(Registration("topic", topic, ""))

    def _http_topic_delete(self, params: dict[str, list[str]]) -> None:
        topic = _param(params, "topic", "MISSING_ARG_TOPIC")
        for key in self.db.find_registrations("channel", topic, "*"):
            self.db.remove_registration(key)
        for key in self.db.find_registrations("topic", topic, ""):
            self.db.remove_registration(key)

    def _http_topic_tombstone(self, params: dict[str, list[str]]) -> None:
        topic = _param(params, "topic", "MISSING_ARG_TOPIC")
        node = _param(params, "node", "MISSING_ARG_NODE")
        now = self._clock()
        for producer in self.db.find_producers("topic", topic, ""):
            if f"{producer.peer.broadcast_address}:{producer.peer.http_port}" == node:
                producer.tombstoned_at = now

    def _http_channel_create(self, params: dict[str, list[str]]) -> None:
        topic, channel = _topic_channel_args(params)
        self.db.add_registration(Registration("channel", topic, channel))
        self.db.add_registration(Registration("topic", topic, ""))

    def _http_channel_delete(self, params: dict[str, list[str]]) -> None:
        topic, channel = _topic_channel_args(params)
        keys = self.db.find_registrations("channel", topic, channel)
        if not keys:
            raise _HTTPError(404, "CHANNEL_NOT_FOUND")
        for key in keys:
            self.db.remove_registration(key)


_Handler = Callable[[Lookupd, dict[str, list[str]]], Any]
_ROUTES: dict[str, tuple[str, _Handler]] = {
    "/ping": ("GET", Lookupd._http_ping),
    "/info": ("GET", Lookupd._http_info),
    "/topics": ("GET", Lookupd._http_topics),
    "/channels": ("GET", Lookupd._http_channels),
    "/lookup": ("GET", Lookupd._http_lookup),
    "/nodes": ("GET", Lookupd._http_nodes),
    "/topic/create": ("POST", Lookupd._http_topic_create),
    "/topic/delete": ("POST", Lookupd._http_topic_delete),
    "/topic/tombstone": ("POST", Lookupd._http_topic_tombstone),
    "/channel/create": ("POST", Lookupd._http_channel_create),
    "/channel/delete": ("POST", Lookupd._http_channel_delete),
}


def _key_text(key: Registration) -> tuple[str, str, str]:
    return key.category, key.key, key.subkey


def _format_remote(address: tuple[Any, ...]) -> str:
    host, port = str(address[0]), int(address[1])
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _close_quietly(sock: gevent.socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(_stdlib_socket.SHUT_RDWR)
    sock.close()


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------

def _normalize_flags(argv: Sequence[str]) -> list[str]:
    """Accept Go's single-dash long flags (``-tcp-address``) as well."""
    out = []
    for arg in argv:
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 2:
            arg = "-" + arg
        out.append(arg)
    return out


def _arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gnsqlite.broker.lookupd",
        description="An nsqlookupd-compatible server (gnsqlite).",
    )
    parser.add_argument("--tcp-address", default="0.0.0.0:4160",
                        help="<addr>:<port> to listen on for TCP clients")
    parser.add_argument("--http-address", default="0.0.0.0:4161",
                        help="<addr>:<port> to listen on for HTTP clients")
    parser.add_argument("--broadcast-address", default=None,
                        help="address of this lookupd node (defaults to the OS hostname)")
    parser.add_argument("--inactive-producer-timeout", type=parse_duration, default=300.0,
                        help="how long a producer stays active since its last ping (5m0s)")
    parser.add_argument("--tombstone-lifetime", type=parse_duration, default=45.0,
                        help="how long a producer stays tombstoned (45s)")
    parser.add_argument("--log-level", default="info",
                        choices=["debug", "info", "warn", "error", "fatal"])
    parser.add_argument("--log-prefix", default="[nsqlookupd] ")
    parser.add_argument("--version", action="store_true", help="print version string")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run a lookupd until SIGINT or SIGTERM; returns the exit status."""
    args = _arg_parser().parse_args(_normalize_flags(sys.argv[1:] if argv is None else argv))
    if args.version:
        print(f"nsqlookupd v{VERSION} (gnsqlite)")
        return 0
    level = {"warn": "WARNING", "fatal": "CRITICAL"}.get(args.log_level, args.log_level.upper())
    logging.basicConfig(level=level, format=f"{args.log_prefix}%(asctime)s %(message)s")
    server = Lookupd(
        tcp_address=args.tcp_address,
        http_address=args.http_address,
        broadcast_address=args.broadcast_address,
        inactive_producer_timeout=args.inactive_producer_timeout,
        tombstone_lifetime=args.tombstone_lifetime,
    )
    stopping = gevent.event.Event()
    handlers = [gevent.signal_handler(sig, stopping.set) for sig in (signal.SIGINT, signal.SIGTERM)]
    try:
        server.start()
    except OSError as exc:
        print(f"FATAL: cannot listen: {exc}", file=sys.stderr)
        return 1
    try:
        stopping.wait()
    finally:
        server.stop()
        for handler in handlers:
            handler.cancel()
    return 0


if __name__ == "__main__":
    sys.exit(main())
