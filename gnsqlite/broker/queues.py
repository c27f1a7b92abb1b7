"""Topics and channels of the embedded broker: where messages wait and fly.

No I/O and no clock here: every call that depends on time takes ``now``
(monotonic float seconds). The broker calls these from one hub, so nothing
needs a lock.

* A :class:`Topic` copies every message to each of its channels; with no
  channel (or while paused) it holds messages until it can hand them over.
* A :class:`Channel` queues messages, hands them to subscribers within each
  one's RDY count (round robin), keeps them in flight until FIN, REQ or the
  subscriber's ``msg_timeout``, and defers REQ/DPUB'd messages.

In-flight timeouts are tracked per ``msg_timeout`` value in insertion-ordered
dicts: messages delivered with the same timeout expire in delivery order, so
:meth:`Channel.scan` only looks at the ones due (a TOUCH moves a message to
the end; one whose TOUCH was capped by ``max_msg_timeout`` goes to a small
side table scanned in full).
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable, Iterable
from typing import Protocol

from ..protocol.names import is_ephemeral

__all__ = ["BrokerMessage", "Subscriber", "Channel", "Topic", "NotInFlight"]


class BrokerMessage:
    """One message of one channel (each channel gets its own copy).

    ``timestamp`` is ns since the epoch when it was published, ``attempts``
    how many deliveries so far, ``delay`` the DPUB delay in seconds a topic
    applies when it hands the message to a channel.
    """

    __slots__ = (
        "attempts",
        "body",
        "delay",
        "delivered_at",
        "expires_at",
        "id",
        "owner",
        "timestamp",
    )

    def __init__(
        self, message_id: bytes, body: bytes, timestamp: int, attempts: int = 0, delay: float = 0.0
    ) -> None:
        self.id = message_id
        self.body = body
        self.timestamp = timestamp
        self.attempts = attempts
        self.delay = delay
        self.owner: Subscriber | None = None
        self.delivered_at = 0.0
        self.expires_at = 0.0

    def copy(self) -> BrokerMessage:
        """A fresh copy for another channel."""
        return BrokerMessage(self.id, self.body, self.timestamp, self.attempts, self.delay)


class Subscriber(Protocol):
    """What a channel needs from a subscribed client connection."""

    ready_count: int
    in_flight_count: int
    message_count: int
    finish_count: int
    requeue_count: int
    msg_timeout: float
    sample_rate: int
    closing: bool

    def send_message(self, message: BrokerMessage) -> None:
        """Queue the message frame for sending (must not block)."""
        ...

    def close(self) -> None:
        """Close the connection (its channel was deleted)."""
        ...


class NotInFlight(Exception):
    """FIN/REQ/TOUCH of a message that is not in flight, or not the caller's."""


class Channel:
    """A channel: a queue of messages shared by its subscribers."""

    def __init__(self, topic_name: str, name: str, max_msg_timeout: float) -> None:
        self.topic_name = topic_name
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.max_msg_timeout = max_msg_timeout
        self.queue: deque[BrokerMessage] = deque()
        self.in_flight: dict[bytes, BrokerMessage] = {}
        self._timeouts: dict[float, dict[bytes, BrokerMessage]] = {}
        self._capped: dict[bytes, BrokerMessage] = {}
        self._deferred: list[tuple[float, int, BrokerMessage]] = []
        self._seq = 0
        self.subscribers: list[Subscriber] = []
        self._next = 0
        self.paused = False
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        self.deleted = False

    def __repr__(self) -> str:
        return f"<Channel {self.topic_name}/{self.name}>"

    @property
    def deferred_count(self) -> int:
        """Messages waiting for their REQ or DPUB delay."""
        return len(self._deferred)

    # -- putting -----------------------------------------------------------

    def put(self, message: BrokerMessage, now: float) -> None:
        """Queue a message from the topic (deferring it if it has a delay)."""
        self.message_count += 1
        if message.delay > 0:
            self._defer(message, now + message.delay)
        else:
            self.queue.append(message)

    def _defer(self, message: BrokerMessage, at: float) -> None:
        self._seq += 1
        heapq.heappush(self._deferred, (at, self._seq, message))

    # -- subscribers -------------------------------------------------------

    def add_subscriber(self, client: Subscriber) -> None:
        """Add a subscriber (SUB)."""
        self.subscribers.append(client)

    def remove_subscriber(self, client: Subscriber) -> None:
        """Remove a subscriber; its in-flight messages stay until they time out."""
        if client in self.subscribers:
            self.subscribers.remove(client)

    # -- delivering --------------------------------------------------------

    def pump(self, now: float) -> None:
        """Hand queued messages to subscribers that have room (RDY > in flight)."""
        queue = self.queue
        if self.paused or not queue or not self.subscribers:
            return
        ready = [c for c in self.subscribers if c.ready_count > c.in_flight_count and not c.closing]
        if not ready:
            return
        if len(ready) == 1:
            client = ready[0]
            for _ in range(min(len(queue), client.ready_count - client.in_flight_count)):
                self._deliver(client, queue.popleft(), now)
            return
        start = self._next % len(ready)
        ready = ready[start:] + ready[:start]
        self._next += 1
        while queue and ready:
            for client in list(ready):
                if not queue:
                    break
                self._deliver(client, queue.popleft(), now)
                if client.in_flight_count >= client.ready_count:
                    ready.remove(client)

    def _deliver(self, client: Subscriber, message: BrokerMessage, now: float) -> None:
        rate = client.sample_rate
        if rate > 0 and random.randrange(100) > rate:
            return  # sampled out: like nsqd, this channel drops it for this client
        message.attempts += 1
        message.owner = client
        message.delivered_at = now
        timeout = client.msg_timeout
        message.expires_at = now + timeout
        self.in_flight[message.id] = message
        bucket = self._timeouts.get(timeout)
        if bucket is None:
            bucket = self._timeouts[timeout] = {}
        bucket[message.id] = message
        client.in_flight_count += 1
        client.message_count += 1
        client.send_message(message)

    def _take(self, client: Subscriber, message_id: bytes) -> BrokerMessage:
        message = self.in_flight.get(message_id)
        if message is None:
            raise NotInFlight("ID not in flight")
        if message.owner is not client:
            raise NotInFlight("client does not own message")
        del self.in_flight[message_id]
        self._untrack(message)
        client.in_flight_count -= 1
        return message

    def _untrack(self, message: BrokerMessage) -> None:
        """Forget an in-flight message's timeout (its owner's bucket, or the capped table)."""
        if self._capped.pop(message.id, None) is None and message.owner is not None:
            self._timeouts[message.owner.msg_timeout].pop(message.id, None)

    def finish(self, client: Subscriber, message_id: bytes, now: float) -> None:
        """FIN: the message is done. Raises :class:`NotInFlight`."""
        self._take(client, message_id)
        client.finish_count += 1
        self.pump(now)

    def requeue(self, client: Subscriber, message_id: bytes, delay: float, now: float) -> None:
        """REQ: queue the message again, after ``delay`` seconds. Raises :class:`NotInFlight`."""
        message = self._take(client, message_id)
        message.owner = None
        client.requeue_count += 1
        self.requeue_count += 1
        if delay > 0:
            self._defer(message, now + delay)
        else:
            self.queue.append(message)
        self.pump(now)

    def touch(self, client: Subscriber, message_id: bytes, now: float) -> None:
        """TOUCH: restart the message's timeout (capped at delivery + max_msg_timeout)."""
        message = self.in_flight.get(message_id)
        if message is None:
            raise NotInFlight("ID not in flight")
        if message.owner is not client:
            raise NotInFlight("client does not own message")
        self._untrack(message)
        expires = now + client.msg_timeout
        limit = message.delivered_at + self.max_msg_timeout
        if expires > limit:
            message.expires_at = limit
            self._capped[message_id] = message
        else:
            message.expires_at = expires
            self._timeouts.setdefault(client.msg_timeout, {})[message_id] = message

    # -- time --------------------------------------------------------------

    def scan(self, now: float) -> None:
        """Requeue timed-out messages, release due deferred ones, then pump."""
        expired: list[BrokerMessage] = []
        for bucket in self._timeouts.values():
            for message in bucket.values():
                if message.expires_at > now:
                    break
                expired.append(message)
        expired.extend(m for m in self._capped.values() if m.expires_at <= now)
        for message in expired:
            self._untrack(message)
            del self.in_flight[message.id]
            owner = message.owner
            if owner is not None:
                owner.in_flight_count -= 1
            message.owner = None
            self.timeout_count += 1
            self.queue.append(message)
        deferred = self._deferred
        while deferred and deferred[0][0] <= now:
            self.queue.append(heapq.heappop(deferred)[2])
        if self.queue:
            self.pump(now)

    # -- administration ----------------------------------------------------

    def empty(self) -> None:
        """Drop every queued, deferred and in-flight message (like nsqd's Empty)."""
        self.queue.clear()
        for message in self.in_flight.values():
            if message.owner is not None:
                message.owner.in_flight_count -= 1
                message.owner = None
        self.in_flight.clear()
        self._timeouts.clear()
        self._capped.clear()
        self._deferred.clear()

    def all_messages(self) -> list[BrokerMessage]:
        """Queued, then in-flight, then deferred messages (the order nsqd flushes them)."""
        return [*self.queue, *self.in_flight.values(), *(m for _, _, m in sorted(self._deferred))]


class Topic:
    """A topic: copies each message to every channel, or holds it until one exists."""

    def __init__(
        self,
        name: str,
        max_msg_timeout: float,
        on_channel: Callable[[Topic, Channel, bool], None] | None = None,
    ) -> None:
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.max_msg_timeout = max_msg_timeout
        self.channels: dict[str, Channel] = {}
        self.held: deque[BrokerMessage] = deque()
        self.paused = False
        #: ``False`` while nsqd would not have started the topic's message pump yet
        #: (it is asking lookupd for channels to create): messages are held.
        self.started = True
        self.message_count = 0
        self.message_bytes = 0
        self.deleted = False
        self._on_channel = on_channel

    def __repr__(self) -> str:
        return f"<Topic {self.name}>"

    def put(self, messages: Iterable[BrokerMessage], now: float) -> None:
        """Publish messages: to every channel now, or held for later."""
        batch = list(messages)
        self.message_count += len(batch)
        self.message_bytes += sum(len(m.body) for m in batch)
        if self.paused or not self.started or not self.channels:
            self.held.extend(batch)
            return
        self._distribute(batch, now)

    def _distribute(self, batch: list[BrokerMessage], now: float) -> None:
        channels = list(self.channels.values())
        first, rest = channels[0], channels[1:]
        for message in batch:
            for channel in rest:
                channel.put(message.copy(), now)
            first.put(message, now)
        for channel in channels:
            channel.pump(now)

    def flush_held(self, now: float) -> None:
        """Hand held messages to the channels, if any and not paused."""
        if self.held and self.channels and not self.paused and self.started:
            batch = list(self.held)
            self.held.clear()
            self._distribute(batch, now)

    def get_channel(self, name: str, now: float) -> Channel:
        """The channel called ``name``, created (and announced) if new."""
        channel = self.channels.get(name)
        if channel is None:
            channel = self.channels[name] = Channel(self.name, name, self.max_msg_timeout)
            if self._on_channel is not None:
                self._on_channel(self, channel, True)
            self.flush_held(now)
        return channel

    def delete_channel(self, name: str) -> Channel | None:
        """Remove a channel and announce it; returns it, or ``None`` if unknown."""
        channel = self.channels.pop(name, None)
        if channel is not None:
            channel.deleted = True
            if self._on_channel is not None:
                self._on_channel(self, channel, False)
        return channel

    def empty(self) -> None:
        """Drop the messages the topic holds (not its channels')."""
        self.held.clear()
