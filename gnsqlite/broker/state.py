"""The embedded nsqd's state: topics, channels, client sessions, ids, persistence.

:class:`BrokerState` holds everything the protocols act on and knows none of
them: the TCP front end (:mod:`.client`), the HTTP API (:mod:`.http_api`) and
the stats documents (:mod:`.stats`) import it, and the server that opens the
listeners (:class:`~gnsqlite.broker.nsqd.Broker`) builds on it. What it needs
from a client connection is the :class:`Session` protocol; what it needs from
nsqlookupd is the :class:`ChannelDirectory` protocol. Constructing one opens
nothing and starts nothing. All state lives in one gevent hub; nothing needs
a lock.
"""

from __future__ import annotations

import logging
import os
import socket as _stdlib_socket
import ssl as _stdlib_ssl
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from ..protocol.names import is_ephemeral
from ..protocol.server import IdentifyLimits
from . import persist
from .options import BrokerOptions
from .queues import BrokerMessage, Channel, Subscriber, Topic

__all__ = ["NSQD_VERSION", "BrokerState", "ChannelDirectory", "Listener", "Session"]

log = logging.getLogger(__name__)

#: The nsqd version the broker reports (IDENTIFY, /info, /stats, lookupd).
NSQD_VERSION = "1.3.0"

#: ``callback(action, topic, channel)``: action ``"REGISTER"``/``"UNREGISTER"``,
#: ``channel`` ``None`` for the topic itself. Must not block.
Listener = Callable[[str, str, "str | None"], None]


class Session(Subscriber, Protocol):
    """What the state needs from one client connection (a TCP protocol session)."""

    channel: Channel | None

    def tick(self, now: float) -> None:
        """Send a due heartbeat, or close the connection if it went silent (never blocks)."""
        ...


class ChannelDirectory(Protocol):
    """What the state asks nsqlookupd: the channels it knows for a topic (blocks)."""

    def topic_channels(
        self, topic: str, timeout: float = 5.0, connect_timeout: float | None = None
    ) -> list[str]:
        """The channel names registered for ``topic``; waits at most ``timeout`` seconds
        (``connect_timeout`` for each connect)."""
        ...


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


class BrokerState:
    """Topics, channels and client sessions of one broker, and the operations on them.

    ``options`` are :class:`~gnsqlite.broker.options.BrokerOptions`' keywords.
    The server fills in the bound addresses and ports, the TLS context and the
    lookupd directory (``_lookup``, a :class:`ChannelDirectory`); until then they
    are empty.
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
        self.clients: set[Session] = set()
        self.tls_context: _stdlib_ssl.SSLContext | None = None
        self.identify_limits = self._identify_limits()
        self._listeners: list[Listener] = []
        self._new_id = _MessageIds()
        self._lookup: ChannelDirectory | None = None

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

    # -- timers ------------------------------------------------------------

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
                self._precreate_channels(topic, self._lookup)
        return topic

    def _precreate_channels(self, topic: Topic, lookup: ChannelDirectory) -> None:
        """Create the channels lookupd knows for a new topic, as nsqd's ``GetTopic`` does.

        nsqd makes a blocking call to every lookupd's ``/channels`` and creates
        the non-ephemeral channels found before starting the topic's message
        pump, so that every channel gets the topic's first messages; until
        then (this greenlet yields) what is published to the topic is held.
        """
        topic.started = False
        try:
            names = lookup.topic_channels(
                topic.name,
                self.options.http_client_timeout,
                self.options.http_client_connect_timeout,
            )
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

    def _subscribe(self, client: Session, topic_name: str, channel_name: str) -> Channel:
        channel = self.get_topic(topic_name).get_channel(channel_name, time.monotonic())
        channel.add_subscriber(client)
        return channel

    def _client_closed(self, client: Session) -> None:
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
