"""The embedded nsqd: :class:`Broker` owns the servers, topics and timers.

``Broker(**options)`` opens nothing; :meth:`Broker.start` loads persisted
messages (``data_path``), binds the TCP and HTTP listeners (raising at once
if a port is taken), starts the scan greenlet that drives in-flight
timeouts, deferred messages and heartbeats (like nsqd's ``queueScanLoop``),
and attaches to nsqlookupd when ``lookupd_tcp_addresses`` are given.
:meth:`Broker.stop` closes every client, stops everything it started and
persists. All state lives in one gevent hub; nothing needs a lock.
"""

from __future__ import annotations

import logging
import os
import socket as _stdlib_socket
import ssl as _stdlib_ssl
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import gevent
import gevent.pool
import gevent.pywsgi
import gevent.server
import gevent.ssl

from ..net import format_address, parse_address, set_nodelay
from ..protocol.names import is_ephemeral
from ..protocol.server import IdentifyLimits
from . import persist
from .client import ClientSession
from .http_api import HttpApi
from .options import BrokerOptions
from .queues import BrokerMessage, Channel, Topic

__all__ = ["Broker", "Listener", "NSQD_VERSION"]

log = logging.getLogger(__name__)

#: The nsqd version the broker reports (IDENTIFY, /info, /stats, lookupd).
NSQD_VERSION = "1.2.1"

#: ``callback(action, topic, channel)``: action ``"REGISTER"``/``"UNREGISTER"``,
#: ``channel`` ``None`` for the topic itself. Must not block.
Listener = Callable[[str, str, "str | None"], None]


class _MessageIds:
    """Unique 16-hex-byte message ids, increasing, never reused after a restart."""

    def __init__(self) -> None:
        self._next = (time.time_ns() // 1_000_000) << 20

    def bump_past(self, used: Iterable[bytes]) -> None:
        for message_id in used:
            try:
                value = int(message_id, 16)
            except ValueError:
                continue
            if value >= self._next:
                self._next = value + 1

    def __call__(self) -> bytes:
        value = self._next
        self._next = value + 1
        return b"%016x" % (value & 0xFFFFFFFFFFFFFFFF)


class Broker:
    """An nsqd-compatible broker on gevent; options are nsqd's flags in Python units.

    See :class:`~gnsqlite.broker.options.BrokerOptions` for every option
    (``tcp_address="127.0.0.1:4150"``, ``http_address="127.0.0.1:4151"``,
    port 0 for a free port, ``msg_timeout=60.0`` seconds, ...).
    """

    def __init__(self, **options: Any) -> None:
        self.options = BrokerOptions(**options)
        self.version = NSQD_VERSION
        self.hostname = _stdlib_socket.gethostname()
        self.broadcast_address = self.options.broadcast_address or self.hostname
        self.tcp_address: str | None = None
        self.http_address: str | None = None
        self.tcp_port = 0
        self.http_port = 0
        self.start_time = int(time.time())
        self.topics: dict[str, Topic] = {}
        self.clients: set[ClientSession] = set()
        self.tls_context: _stdlib_ssl.SSLContext | None = None
        self.identify_limits = self._identify_limits()
        self._listeners: list[Listener] = []
        self._new_id = _MessageIds()
        self._tcp_server: gevent.server.StreamServer | None = None
        self._http_server: gevent.pywsgi.WSGIServer | None = None
        self._pools: list[gevent.pool.Pool] = []
        self._scanner: gevent.Greenlet[Any, Any] | None = None
        self._lookup: Any = None
        self._started = False

    def __repr__(self) -> str:
        return f"<Broker tcp={self.tcp_address} http={self.http_address}>"

    def __enter__(self) -> Broker:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def is_running(self) -> bool:
        """``True`` between :meth:`start` and :meth:`stop`."""
        return self._started

    def _identify_limits(self) -> IdentifyLimits:
        o = self.options

        def ms(seconds: float) -> int:
            return round(seconds * 1000)

        return IdentifyLimits(
            version=self.version,
            max_rdy_count=o.max_rdy_count,
            msg_timeout_ms=ms(o.msg_timeout),
            max_msg_timeout_ms=ms(o.max_msg_timeout),
            heartbeat_interval_ms=ms(o.client_timeout / 2),
            max_heartbeat_interval_ms=ms(o.max_heartbeat_interval),
            max_output_buffer_size=o.max_output_buffer_size,
            output_buffer_timeout_ms=ms(o.output_buffer_timeout),
            min_output_buffer_timeout_ms=ms(o.min_output_buffer_timeout),
            max_output_buffer_timeout_ms=ms(o.max_output_buffer_timeout),
            tls=o.tls_cert is not None,
            snappy=o.snappy,
            deflate=o.deflate,
            max_deflate_level=o.max_deflate_level,
            auth_required=o.auth_enabled,
        )

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Load, bind and serve; returns at once. Raises ``OSError`` if a bind fails."""
        if self._started:
            return
        o = self.options
        if o.tls_cert is not None:
            self.tls_context = self._build_tls_context()
        if o.data_path is not None:
            self._load()
        # the servers spawn connection greenlets into pools this broker kills on stop
        self._pools = [gevent.pool.Pool(), gevent.pool.Pool()]
        tcp = gevent.server.StreamServer(
            parse_address(o.tcp_address), self._handle_connection, spawn=self._pools[0]
        )
        http = gevent.pywsgi.WSGIServer(
            parse_address(o.http_address),
            HttpApi(self),
            spawn=self._pools[1],
            log=None,
            error_log=logging.getLogger(__name__ + ".http"),
        )
        try:
            tcp.start()
            http.start()
        except BaseException:
            tcp.stop()
            http.stop()
            raise
        self._tcp_server = tcp
        self._http_server = http
        self.tcp_port = int(tcp.server_port or 0)
        self.http_port = int(http.server_port or 0)
        self.tcp_address = format_address((str(tcp.server_host), self.tcp_port))
        self.http_address = format_address((str(http.server_host), self.http_port))
        self.start_time = int(time.time())
        self._started = True
        self._scanner = gevent.spawn(self._scan_loop)
        log.info("TCP: listening on %s; HTTP: listening on %s", self.tcp_address, self.http_address)
        if o.lookupd_tcp_addresses:
            from . import lookup_peer  # engineer B's module; imported only when needed

            self._lookup = lookup_peer.attach(self, list(o.lookupd_tcp_addresses))

    def stop(self) -> None:
        """Close every client, stop serving, persist to ``data_path``; blocks briefly."""
        if not self._started:
            return
        self._started = False
        if self._lookup is not None:
            try:
                self._lookup.close()
            except Exception:
                log.exception("closing the lookupd peers failed")
            self._lookup = None
        if self._scanner is not None:
            self._scanner.kill()
            self._scanner = None
        if self._tcp_server is not None:
            self._tcp_server.close()
        for client in list(self.clients):
            client.close()
        if self._tcp_server is not None:
            self._tcp_server.stop(timeout=1)
            self._tcp_server = None
        if self._http_server is not None:
            self._http_server.stop(timeout=1)
            self._http_server = None
        for pool in self._pools:
            pool.kill(timeout=1)
        self._pools = []
        if self.options.data_path is not None:
            try:
                self._save()
            except OSError:
                log.exception("persisting to %s failed", self.options.data_path)

    def _build_tls_context(self) -> _stdlib_ssl.SSLContext:
        o = self.options
        context = gevent.ssl.SSLContext(gevent.ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(o.tls_cert), o.tls_key)
        if o.tls_root_ca_file is not None:
            context.load_verify_locations(o.tls_root_ca_file)
            context.verify_mode = _stdlib_ssl.CERT_OPTIONAL
        return context

    def _handle_connection(self, sock: Any, address: tuple[str, int]) -> None:
        set_nodelay(sock)
        client = ClientSession(self, sock, address)
        self.clients.add(client)
        log.debug("TCP: new client %s", client.remote_address)
        client.serve()

    def _scan_loop(self) -> None:
        interval = self.options.queue_scan_interval
        while True:
            gevent.sleep(interval)
            try:
                self.scan(time.monotonic())
            except Exception:
                log.exception("queue scan failed")

    def scan(self, now: float) -> None:
        """Time out in-flight messages, release deferred ones, send heartbeats."""
        for topic in list(self.topics.values()):
            for channel in list(topic.channels.values()):
                channel.scan(now)
        for client in list(self.clients):
            client.tick(now)

    # -- listeners ---------------------------------------------------------

    def add_listener(self, callback: Listener) -> None:
        """Call ``callback(action, topic, channel)`` on every topic/channel change."""
        self._listeners.append(callback)

    def remove_listener(self, callback: Listener) -> None:
        """Stop calling ``callback``; unknown callbacks are ignored."""
        if callback in self._listeners:
            self._listeners.remove(callback)

    def _notify(self, action: str, topic: str, channel: str | None) -> None:
        for callback in list(self._listeners):
            try:
                callback(action, topic, channel)
            except Exception:
                log.exception("listener %r failed on %s %s %s", callback, action, topic, channel)

    def registrations(self) -> list[tuple[str, str | None]]:
        """What nsqd registers with lookupd: ``(topic, None)`` and ``(topic, channel)``."""
        out: list[tuple[str, str | None]] = []
        for topic in self.topics.values():
            out.append((topic.name, None))
            out.extend((topic.name, name) for name in topic.channels)
        return out

    def _on_channel(self, topic: Topic, channel: Channel, created: bool) -> None:
        self._notify("REGISTER" if created else "UNREGISTER", topic.name, channel.name)

    # -- topics and channels -------------------------------------------------

    def get_topic(self, name: str) -> Topic:
        """The topic called ``name``, created (and announced) if new."""
        topic = self.topics.get(name)
        if topic is None:
            topic = self.topics[name] = Topic(name, self.options.max_msg_timeout, self._on_channel)
            self._notify("REGISTER", name, None)
            if self._lookup is not None:
                self._precreate_channels(topic)
        return topic

    def _precreate_channels(self, topic: Topic) -> None:
        """Create the channels lookupd knows for a new topic, as nsqd's ``GetTopic`` does.

        nsqd makes a blocking call to every lookupd's ``/channels`` and creates
        the non-ephemeral channels found before starting the topic's message
        pump, so that every channel gets the topic's first messages; until
        then (this greenlet yields) what is published to the topic is held.
        """
        topic.started = False
        try:
            names = self._lookup.topic_channels(topic.name, self.options.http_client_timeout)
        except Exception:
            log.exception("querying lookupd for the channels of %s failed", topic.name)
            names = []
        finally:
            topic.started = True
        now = time.monotonic()
        if not topic.deleted:
            for channel_name in names:
                if not is_ephemeral(channel_name):
                    topic.get_channel(channel_name, now)
        topic.flush_held(now)

    def publish(self, topic_name: str, bodies: Sequence[bytes], delay: float = 0.0) -> None:
        """Publish message bodies now (or after ``delay`` seconds)."""
        topic = self.get_topic(topic_name)
        stamp = time.time_ns()
        new_id = self._new_id
        topic.put([BrokerMessage(new_id(), b, stamp, 0, delay) for b in bodies], time.monotonic())

    def create_channel(self, topic: Topic, name: str) -> Channel:
        """The channel ``name`` of ``topic``, created (and announced) if new."""
        return topic.get_channel(name, time.monotonic())

    def _subscribe(self, client: ClientSession, topic_name: str, channel_name: str) -> Channel:
        channel = self.get_topic(topic_name).get_channel(channel_name, time.monotonic())
        channel.add_subscriber(client)
        return channel

    def _client_closed(self, client: ClientSession) -> None:
        self.clients.discard(client)
        channel = client.channel
        if channel is None:
            return
        channel.remove_subscriber(client)
        if channel.ephemeral and not channel.subscribers and not channel.deleted:
            self.delete_channel(channel.topic_name, channel.name)

    def delete_topic(self, name: str) -> bool:
        """Delete a topic and its channels, closing their clients; ``False`` if unknown."""
        topic = self.topics.get(name)
        if topic is None:
            return False
        topic.deleted = True
        for channel_name in list(topic.channels):
            self._drop_channel(topic, channel_name)
        del self.topics[name]
        self._notify("UNREGISTER", name, None)
        return True

    def delete_channel(self, topic_name: str, channel_name: str) -> bool:
        """Delete a channel, closing its clients; ``False`` if unknown.

        An ``#ephemeral`` topic left without channels is deleted too.
        """
        topic = self.topics.get(topic_name)
        if topic is None or channel_name not in topic.channels:
            return False
        self._drop_channel(topic, channel_name)
        if topic.ephemeral and not topic.channels and not topic.deleted:
            self.delete_topic(topic_name)
        return True

    def _drop_channel(self, topic: Topic, channel_name: str) -> None:
        channel = topic.delete_channel(channel_name)
        if channel is None:
            return
        for client in list(channel.subscribers):
            client.close()
        channel.empty()

    def pause_topic(self, topic: Topic, paused: bool) -> None:
        """Pause or unpause a topic (it holds messages while paused)."""
        topic.paused = paused
        if not paused:
            topic.flush_held(time.monotonic())

    def pause_channel(self, channel: Channel, paused: bool) -> None:
        """Pause or unpause a channel (it delivers nothing while paused)."""
        channel.paused = paused
        if not paused:
            channel.pump(time.monotonic())

    # -- persistence ---------------------------------------------------------

    def _state_file(self) -> str:
        return os.path.join(str(self.options.data_path), persist.FILE_NAME)

    def _save(self) -> None:
        os.makedirs(str(self.options.data_path), exist_ok=True)
        persist.save(self._state_file(), self.topics.values())
        log.info("persisted topics and messages to %s", self._state_file())

    def _load(self) -> None:
        path = self._state_file()
        if not os.path.exists(path):
            return
        now = time.monotonic()
        for record in persist.load(path):
            topic = self.get_topic(record.name)
            topic.paused = record.paused
            for channel_record in record.channels:
                channel = topic.get_channel(channel_record.name, now)
                channel.paused = channel_record.paused
                self._new_id.bump_past(m.id for m in channel_record.messages)
                for message in channel_record.messages:
                    channel.put(message, now)
            self._new_id.bump_past(m.id for m in record.messages)
            topic.held.extend(record.messages)
            topic.flush_held(now)
        log.info("loaded topics and messages from %s", path)
