"""The nsqd side of nsqlookupd's TCP protocol: keep a broker registered.

:func:`attach` connects the embedded broker to each nsqlookupd (ours or the
real one) the way nsqd does: send the magic ``"  V1"``, ``IDENTIFY`` with the
broker's broadcast address, ports, version and hostname, ``REGISTER`` every
topic and channel that exists, then follow the broker's changes
(``broker.add_listener``) with ``REGISTER``/``UNREGISTER``, and ``PING``
every ``ping_interval`` seconds (15 like nsqd) so lookupd keeps the producer
active. A lost connection is retried with exponential backoff and everything
is registered again.

Each lookupd gets one greenlet, owned by its :class:`LookupPeer`; the
:class:`LookupPeers` returned by :func:`attach` owns them all and
:meth:`LookupPeers.close` kills them (the broker calls it from ``stop()``).
"""

from __future__ import annotations

import json
import logging
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import gevent
import gevent.event
import gevent.queue
import gevent.socket

from ..errors import BrokenConnectionError, NSQTimeoutError, RemoteProtocolError
from ..http_transport import http_request
from ..net import connect_tcp, parse_address
from ..protocol import identify

__all__ = ["BrokerLike", "LookupPeer", "LookupPeers", "attach", "register_commands"]

log = logging.getLogger(__name__)

_MAGIC_V1 = b"  V1"
_SIZE = struct.Struct(">i")
_MAX_RESPONSE = 1024 * 1024

#: ``callback(action, topic, channel)``; action is ``"REGISTER"`` or ``"UNREGISTER"``.
Listener = Callable[[str, str, "str | None"], None]
Pair = tuple[str, "str | None"]


class BrokerLike(Protocol):
    """What :func:`attach` needs from a broker."""

    broadcast_address: str
    hostname: str
    version: str

    @property
    def tcp_port(self) -> int: ...

    @property
    def http_port(self) -> int: ...

    def add_listener(self, callback: Listener) -> None: ...


def _command(action: str, topic: str, channel: str | None) -> bytes:
    if channel:
        return f"{action} {topic} {channel}\n".encode()
    return f"{action} {topic}\n".encode()


def register_commands(pairs: Iterable[Pair]) -> list[bytes]:
    """The REGISTER lines nsqd sends on connect for ``(topic, channel)`` pairs.

    Like nsqd: a topic without channels is registered alone, otherwise each of
    its channels is (which registers the topic too).
    """
    channels: dict[str, list[str]] = {}
    for topic, channel in pairs:
        bucket = channels.setdefault(topic, [])
        if channel and channel not in bucket:
            bucket.append(channel)
    lines: list[bytes] = []
    for topic, names in channels.items():
        if not names:
            lines.append(_command("REGISTER", topic, None))
        lines.extend(_command("REGISTER", topic, name) for name in names)
    return lines


class LookupPeer:
    """One nsqlookupd connection, kept alive by one greenlet.

    ``info`` is lookupd's IDENTIFY answer (``broadcast_address``,
    ``tcp_port``, ``http_port``, ``version``, ``hostname``) once connected.
    """

    def __init__(
        self,
        address: str,
        identity: Callable[[], dict[str, Any]],
        snapshot: Callable[[], list[Pair]],
        ping_interval: float = 15.0,
        timeout: float = 5.0,
        min_backoff: float = 0.1,
        max_backoff: float = 10.0,
    ) -> None:
        self.address = address
        self.host, self.port = parse_address(address)
        self.info: dict[str, Any] | None = None
        self.ping_interval = ping_interval
        self.timeout = timeout
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self._identity = identity
        self._snapshot = snapshot
        self._queue: gevent.queue.Queue[bytes | None] | None = None
        self._registered = gevent.event.Event()
        self._greenlet: gevent.Greenlet[[], None] | None = None
        self._sock: gevent.socket.socket | None = None
        self._closed = False
        self._registered_once = False

    def __repr__(self) -> str:
        state = "registered" if self._registered.is_set() else "connecting"
        return f"<LookupPeer {self.address} {state}>"

    @property
    def registered(self) -> bool:
        """Whether the peer is connected and has sent its initial registrations."""
        return self._registered.is_set()

    def wait_registered(self, timeout: float | None = None) -> bool:
        """Block the calling greenlet until :attr:`registered` (or ``timeout`` s)."""
        return self._registered.wait(timeout)

    def start(self) -> None:
        """Spawn the connection greenlet; does not block."""
        if self._greenlet is None and not self._closed:
            self._greenlet = gevent.spawn(self._run)

    def notify(self, action: str, topic: str, channel: str | None) -> None:
        """Queue a REGISTER/UNREGISTER; dropped while disconnected (the
        reconnect registers everything anew). Never blocks."""
        if self._queue is not None:
            self._queue.put_nowait(_command(action, topic, channel))

    def close(self) -> None:
        """Close the connection and kill the greenlet; blocks at most about a second."""
        self._closed = True
        self._queue = None
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        greenlet, self._greenlet = self._greenlet, None
        if greenlet is not None:
            greenlet.kill(block=True, timeout=1.0)

    # -- inside the greenlet ---------------------------------------------

    def _run(self) -> None:
        backoff = self.min_backoff
        while not self._closed:
            try:
                self._session()
            except (OSError, ValueError, RemoteProtocolError, NSQTimeoutError) as exc:
                log.warning("LOOKUPD(%s): %s", self.address, exc)
            finally:
                self._disconnect()
            if self._registered_once:
                backoff = self.min_backoff
            if self._closed:
                break
            gevent.sleep(backoff)
            backoff = min(backoff * 2, self.max_backoff)

    def _disconnect(self) -> None:
        self._registered.clear()
        self._queue = None
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def _session(self) -> None:
        self._registered_once = False
        sock = connect_tcp((self.host, self.port), self.timeout)
        sock.settimeout(None)
        self._sock = sock
        responses: gevent.queue.Queue[bytes | Exception] = gevent.queue.Queue()
        reader = gevent.spawn(self._read_loop, sock, responses)
        try:
            sock.sendall(_MAGIC_V1)
            response = self._request(sock, responses, identify(self._identity()))
            self.info = json.loads(response)
            # From here to the queue being live nothing yields, so the snapshot and
            # the listener's later changes line up without gap or overlap.
            queue: gevent.queue.Queue[bytes | None] = gevent.queue.Queue()
            self._queue = queue
            for line in register_commands(self._snapshot()):
                self._request(sock, responses, line)
            log.info("LOOKUPD(%s): connected, peer info %s", self.address, self.info)
            self._registered_once = True
            self._registered.set()
            while not self._closed:
                try:
                    item = queue.get(timeout=self.ping_interval)
                except gevent.queue.Empty:
                    item = b"PING\n"
                if item is None:  # the reader saw the connection end
                    break
                self._request(sock, responses, item)
        finally:
            reader.kill(block=True, timeout=1.0)

    def _read_loop(
        self, sock: gevent.socket.socket, responses: gevent.queue.Queue[bytes | Exception]
    ) -> None:
        """Read ``[size][data]`` answers until the connection ends, then wake the writer."""
        try:
            while True:
                size = _SIZE.unpack(self._recv_exactly(sock, 4))[0]
                if not 0 <= size <= _MAX_RESPONSE:
                    raise RemoteProtocolError(f"lookupd sent a response of {size} bytes")
                responses.put(self._recv_exactly(sock, size))
        except (OSError, RemoteProtocolError) as exc:
            responses.put(exc)
        queue = self._queue
        if queue is not None:
            queue.put(None)

    def _request(
        self,
        sock: gevent.socket.socket,
        responses: gevent.queue.Queue[bytes | Exception],
        line: bytes,
    ) -> bytes:
        sock.sendall(line)
        try:
            data = responses.get(timeout=self.timeout)
        except gevent.queue.Empty:
            raise NSQTimeoutError(f"{self.address}: no answer in {self.timeout} s") from None
        if isinstance(data, Exception):
            raise data
        if data.startswith(b"E_"):
            command = line.split(b"\n", 1)[0].decode("utf-8", "replace")
            raise RemoteProtocolError(
                f"lookupd refused {command}: {data.decode('utf-8', 'replace')}"
            )
        return data

    def _recv_exactly(self, sock: gevent.socket.socket, size: int) -> bytes:
        chunks: list[bytes] = []
        left = size
        while left:
            chunk = sock.recv(left)
            if not chunk:
                raise BrokenConnectionError(self.address, "lookupd closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)


class LookupPeers:
    """The lookupd connections of one broker; :meth:`close` ends them all."""

    def __init__(
        self,
        broker: BrokerLike,
        addresses: Sequence[str],
        ping_interval: float = 15.0,
        timeout: float = 5.0,
    ) -> None:
        self.broker = broker
        self._known: dict[Pair, None] = {}
        self.peers = [
            LookupPeer(a, self._identity, self._snapshot, ping_interval, timeout)
            for a in dict.fromkeys(addresses)
        ]
        self._closed = False

    def __repr__(self) -> str:
        return f"<LookupPeers {self.peers!r}>"

    def start(self) -> None:
        """Follow the broker and connect every peer; does not block."""
        self.broker.add_listener(self._on_change)
        for peer in self.peers:
            peer.start()

    def wait_registered(self, timeout: float | None = None) -> bool:
        """Block until every peer is connected and registered, or ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for peer in self.peers:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not peer.wait_registered(left):
                return False
        return True

    def close(self) -> None:
        """Disconnect from every lookupd and kill the greenlets; idempotent."""
        if self._closed:
            return
        self._closed = True
        remove = getattr(self.broker, "remove_listener", None)
        if remove is not None:
            remove(self._on_change)
        for peer in self.peers:
            peer.close()

    def http_addresses(self) -> list[str]:
        """``broadcast_address:http_port`` of every lookupd that has answered IDENTIFY.

        Like nsqd's ``lookupdHTTPAddrs``: a peer keeps its last answer while
        reconnecting; one without a broadcast address is skipped.
        """
        out: list[str] = []
        for peer in self.peers:
            info = peer.info or {}
            host = info.get("broadcast_address")
            port = info.get("http_port")
            if isinstance(host, str) and host and isinstance(port, int):
                out.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
        return out

    def topic_channels(
        self, topic: str, timeout: float = 5.0, connect_timeout: float | None = None
    ) -> list[str]:
        """The channels the lookupds know for ``topic`` (nsqd's ``GetLookupdTopicChannels``).

        Asks each lookupd's ``/channels``; blocks the calling greenlet. The
        union is returned sorted; lookupds that fail are logged and skipped.
        """
        names: set[str] = set()
        for address in self.http_addresses():
            try:
                data = json.loads(
                    http_request(
                        address,
                        "GET",
                        "/channels",
                        {"topic": topic},
                        timeout=timeout,
                        connect_timeout=connect_timeout,
                    )
                )
                channels = data.get("channels") if isinstance(data, dict) else None
                if isinstance(data, dict) and isinstance(data.get("data"), dict):
                    channels = data["data"].get("channels")  # pre-1.0 lookupd envelope
                names.update(c for c in channels or () if isinstance(c, str))
            except Exception as exc:
                log.warning(
                    "LOOKUPD(%s): failed to query channels to pre-create for topic %s - %s",
                    address,
                    topic,
                    exc,
                )
        return sorted(names)

    def _identity(self) -> dict[str, Any]:
        broker = self.broker
        return {
            "version": broker.version,
            "tcp_port": broker.tcp_port,
            "http_port": broker.http_port,
            "hostname": broker.hostname,
            "broadcast_address": broker.broadcast_address,
        }

    def _snapshot(self) -> list[Pair]:
        registrations = getattr(self.broker, "registrations", None)
        if registrations is not None:
            return list(registrations())
        return list(self._known)

    def _on_change(self, action: str, topic: str, channel: str | None) -> None:
        if action == "REGISTER":
            self._known[(topic, channel)] = None
            if channel:
                self._known.pop((topic, None), None)
        elif channel:
            self._known.pop((topic, channel), None)
            if not any(t == topic for t, _ in self._known):
                self._known[(topic, None)] = None
        else:
            for pair in [p for p in self._known if p[0] == topic]:
                del self._known[pair]
        for peer in self.peers:
            peer.notify(action, topic, channel)


def attach(
    broker: BrokerLike,
    addresses: Iterable[str],
    *,
    ping_interval: float = 15.0,
    timeout: float = 5.0,
) -> LookupPeers:
    """Register ``broker`` with each lookupd TCP address and keep it registered.

    Returns at once (connections happen in the background); ``timeout`` bounds
    each connect and each answer, in seconds. Keep the result and call its
    ``close()`` when the broker stops.
    """
    peers = LookupPeers(broker, list(addresses), ping_interval=ping_interval, timeout=timeout)
    peers.start()
    return peers
