"""The Producer: publish to one or more nsqd, pipelined, with failover.

::

    with Producer(["127.0.0.1:4150", "127.0.0.1:5150"]) as producer:
        producer.publish("clicks", b"hello")            # blocks until nsqd answers OK
        producer.multi_publish("clicks", [b"a", b"b"])  # one MPUB
        result = producer.publish_async("clicks", b"x") # an AsyncResult; does not block

Many greenlets may publish at once: requests are pipelined on each
connection and nsqd's answers are matched to them in order. Requests are
spread over the healthy connections in turn. A connection that fails is
reconnected in the background with jittered exponential backoff, and a
publish whose connection dies before nsqd answered is sent again on another
connection within the call's timeout; only when every nsqd has failed does
the call raise :class:`~gnsqlite.errors.NoConnectionsError`, naming each
address and its error.

Delivery is **at-least-once**: a retried publish may have reached the first
nsqd before its connection died, so a consumer can see a duplicate.

Sizes are checked before sending: a message above ``max_message_size``
(nsqd's ``--max-msg-size``) or an MPUB body above ``max_body_size``
(``--max-body-size``) raises :class:`~gnsqlite.errors.MessageTooLargeError`,
an empty body (which nsqd refuses too) raises
:class:`~gnsqlite.errors.LocalProtocolError`, and nothing is sent. Bodies are
``bytes``; a ``str`` is encoded as UTF-8; anything else raises ``TypeError``.

Each connection answers nsqd's heartbeats by itself (an idle producer stays
connected); one that hears nothing for two heartbeat intervals is reconnected.
Attempts and deadlines: :mod:`gnsqlite.producer_attempt`; counters,
``stats()`` and ``health()``: :mod:`gnsqlite.producer_stats`.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any, cast

import gevent
import gevent.event
import gevent.pool

from .config import ConnectionConfig, ProducerConfig
from .connection import Connection
from .errors import (
    ConfigError,
    ConnectionClosedError,
    DPubFailedError,
    LocalProtocolError,
    MessageTooLargeError,
    MPubFailedError,
    NoConnectionsError,
    NSQConnectionError,
    PubFailedError,
    ServerError,
)
from .flow import Reconnect
from .net import normalize_addresses
from .producer_attempt import Attempt, Deadlines
from .producer_stats import PublishCounting, PublishTiming, error_code
from .protocol import as_body, check_topic_name, commands, to_milliseconds
from .timers import Timer, TimerWheel

__all__ = ["Producer", "error_code"]

log = logging.getLogger(__name__)

_RETRYABLE = (NSQConnectionError, PubFailedError, MPubFailedError, DPubFailedError)
#: The command names stats() counts publishes under: the wire's, in lower case.
_COUNTED_AS = {command: command.lower() for command in ("PUB", "MPUB", "DPUB")}


class Producer(Deadlines, PublishCounting):
    """Publishes to the nsqd at ``nsqd_tcp_addresses`` (``"host:port"`` strings).

    ``timeout`` (seconds) bounds each blocking call, retries included.
    ``reconnect_interval`` and ``max_reconnect_interval`` (seconds) bound
    the jittered exponential backoff between reconnection attempts. Options
    left out (or ``None``) take :class:`~gnsqlite.config.ProducerConfig`'s
    defaults: 5 s, nsqd's 1 MiB message and 5 MiB body limits, 1 s and 60 s.
    Connection options (``heartbeat_interval``, ``tls_v1``, ``snappy``,
    ``auth_secret`` ...) are passed as keywords or as ``config``.

    The constructor opens nothing; :meth:`start` connects.
    """

    def __init__(
        self,
        nsqd_tcp_addresses: str | Iterable[str],
        *,
        config: ConnectionConfig | None = None,
        timeout: float | None = None,
        max_message_size: int | None = None,
        max_body_size: int | None = None,
        reconnect_interval: float | None = None,
        max_reconnect_interval: float | None = None,
        **options: Any,
    ) -> None:
        addresses = normalize_addresses("nsqd_tcp_addresses", nsqd_tcp_addresses)
        if not addresses:
            raise ConfigError("nsqd_tcp_addresses is empty: give at least one 'host:port'")
        if config is not None and options:
            raise ConfigError("pass connection options either as config= or as keywords, not both")
        self.config = config if config is not None else ConnectionConfig.from_mapping(options)
        given: dict[str, Any] = {
            "timeout": timeout,
            "max_message_size": max_message_size,
            "max_body_size": max_body_size,
            "reconnect_interval": reconnect_interval,
            "max_reconnect_interval": max_reconnect_interval,
        }
        #: The producer's own options, validated together.
        self.producer_config = settings = ProducerConfig(
            **{name: value for name, value in given.items() if value is not None}
        )
        self._reconnect = Reconnect(settings.reconnect_interval, settings.max_reconnect_interval)
        self.addresses: tuple[str, ...] = addresses
        self.timeout = settings.timeout
        self.max_message_size = settings.max_message_size
        self.max_body_size = settings.max_body_size
        self.reconnect_interval = settings.reconnect_interval
        self.max_reconnect_interval = settings.max_reconnect_interval
        self._conns: dict[str, Connection] = {}
        self._last_error: dict[str, BaseException] = {}
        self._healthy: list[Connection] = []
        self._next = 0
        self._waiting: list[Attempt] = []
        # Attempts a caller blocks on, in the order the waits began: one wheel
        # timer (at the earliest deadline) fails the late ones, instead of a
        # gevent Timeout per call.
        self._timed: deque[Attempt] = deque()
        self._deadline_timer: Timer | None = None
        self._deadline_at = math.inf
        self._group = gevent.pool.Group()
        self._wheel: TimerWheel | None = None
        self._started = False
        self._closed = False
        self._connected = gevent.event.Event()
        # stats(): (topic, command) -> [commands answered OK, messages in them]
        self._published: dict[tuple[str, str], list[int]] = {}
        self._errors: dict[str, int] = {}  # error_code() -> failed publishes
        self._in_flight = 0  # publishes waiting for an answer (or a connection)
        # Callers blocked in _wait on a publish not yet ended, and those whose
        # publish has ended who have not run since: while there are any, a
        # blocking publish leaves its send to the hub's flush, which batches
        # it with theirs (see _submit).
        self._blocked = 0
        self._resuming = 0
        self._publish_timing: PublishTiming | None = None
        self._loop: Any = None  # the hub's loop (start())

    def __repr__(self) -> str:
        return f"<Producer {list(self.addresses)} healthy={len(self._healthy)}>"

    def __enter__(self) -> Producer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- lifecycle ---------------------------------------------------------

    def start(self, timeout: float | None = None) -> None:
        """Connect to every nsqd; blocks until each has connected or failed once.

        Addresses that fail keep reconnecting in the background, and a
        publish waits (within its timeout) for one to come up. ``timeout``
        (seconds, default the producer's ``timeout``) bounds the wait.
        """
        if self._closed:
            raise ConnectionClosedError(",".join(self.addresses), "the producer is closed")
        if self._started:
            return
        self._started = True
        self._wheel = TimerWheel.for_hub()
        self._loop = gevent.get_hub().loop  # wakes blocked callers (Deadlines._woken)
        attempts = [self._group.spawn(self._connect, address) for address in self.addresses]
        gevent.joinall(attempts, timeout=self.timeout if timeout is None else timeout)

    def close(self) -> None:
        """Close every connection and stop reconnecting. Safe to call twice.

        Publishes still waiting for an answer fail with
        :class:`~gnsqlite.errors.ConnectionClosedError`.
        """
        if self._closed:
            return
        self._closed = True
        if self._wheel is not None:
            self._wheel.cancel_owner(self)
        self._group.kill(block=True)
        for conn in list(self._conns.values()):
            conn.close()
        self._conns.clear()
        self._healthy.clear()
        self._timed.clear()
        self._deadline_timer = None  # cancelled with the owner's other timers
        waiting, self._waiting = self._waiting, []
        for attempt in waiting:
            self._fail(attempt, ConnectionClosedError(",".join(self.addresses), "producer closed"))

    def join(self, timeout: float | None = None) -> bool:
        """Block until every greenlet of the producer has ended; ``True`` if so.

        The producer's greenlets are its connection attempts; each
        connection's reader and writer end when it closes.
        """
        done = bool(self._group.join(timeout=timeout))
        return done and all(conn.join(0) for conn in list(self._conns.values()))

    @property
    def connections(self) -> Sequence[Connection]:
        """The connections that can publish now."""
        return tuple(self._healthy)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    # -- connections -------------------------------------------------------

    def _connect(self, address: str) -> None:
        if self._closed:
            return
        conn = Connection(address, self.config, on_close=self._on_close)
        try:
            conn.connect()
        except Exception as exc:
            self._last_error[address] = exc
            # Warn once per outage; the retries that follow are debug noise.
            level = logging.DEBUG if self._reconnect.failures(address) else logging.WARNING
            log.log(level, "producer: cannot connect: %s", exc)
            self._schedule_reconnect(address)
            return
        if self._closed:
            conn.close()
            return
        log.debug("producer: connected to %s", address)
        self._reconnect.succeeded(address)
        self._last_error.pop(address, None)
        self._conns[address] = conn
        self._healthy.append(conn)
        self._connected.set()
        waiting, self._waiting = self._waiting, []
        for attempt in waiting:
            if attempt.expiry is not None:
                # Let go of it now, not at its deadline: the timer holds the
                # attempt, its request and the connections it tried.
                attempt.expiry.cancel()
                attempt.expiry = None
            self._dispatch(attempt)

    def _on_close(self, conn: Connection, error: Exception | None) -> None:
        if conn in self._healthy:
            self._healthy.remove(conn)
        if self._conns.get(conn.name) is conn:
            del self._conns[conn.name]
        if not self._healthy:
            self._connected.clear()
        if error is not None:
            self._last_error[conn.name] = error
        if not self._closed:
            # nsqd closing after refusing one command (a fatal E_* error) says
            # nothing about its health: reconnect at once, without backoff.
            self._schedule_reconnect(conn.name, immediate=isinstance(error, ServerError))

    def _schedule_reconnect(self, address: str, immediate: bool = False) -> None:
        if self._closed or self._wheel is None:
            return
        delay = 0.0 if immediate else self._reconnect.failed(address)
        log.debug("producer: reconnecting to %s in %.2f s", address, delay)
        self._wheel.call_later(delay, self._group.spawn, self._connect, address, owner=self)

    # -- publishing --------------------------------------------------------

    def publish(
        self,
        topic: str,
        body: bytes | str,
        defer: float | None = None,
        timeout: float | None = None,
    ) -> None:
        """PUB (or DPUB when ``defer`` seconds is given); blocks until nsqd answers.

        ``timeout`` (seconds, default the producer's ``timeout``) bounds the
        call, retries on other connections included. Raises the server's
        error (``BadTopicError``, ``BadMessageError`` ...),
        :class:`~gnsqlite.errors.NoConnectionsError` naming each address and
        its error when no nsqd could take the message in time, or
        :class:`~gnsqlite.errors.NSQTimeoutError` when a connection took it
        but nsqd did not answer in time. Invalid names, bodies and sizes
        raise before anything is sent.
        """
        self._wait(self._publish(topic, body, defer, timeout, True), timeout)

    def multi_publish(
        self, topic: str, bodies: Iterable[bytes | str], timeout: float | None = None
    ) -> None:
        """MPUB ``bodies`` atomically; blocks until nsqd answers. Raises like :meth:`publish`."""
        self._wait(self._multi_publish(topic, bodies, timeout, True), timeout)

    def publish_async(
        self,
        topic: str,
        body: bytes | str,
        defer: float | None = None,
        timeout: float | None = None,
    ) -> gevent.event.AsyncResult[bytes]:
        """Like :meth:`publish` but returns an ``AsyncResult`` at once.

        The result resolves to ``b"OK"`` or holds the error. Invalid names,
        bodies and sizes raise here, before anything is queued.
        """
        return self._publish(topic, body, defer, timeout).result

    def _publish(
        self, topic: str, body: bytes | str, defer: float | None, timeout: float | None,
        blocking: bool = False,
    ) -> Attempt:  # fmt: skip
        topic = check_topic_name(topic)
        raw = body if type(body) is bytes else as_body(body)
        if not 0 < len(raw) <= self.max_message_size:
            self._check_message_size(len(raw))  # raises the error that says why
        # Built once, whatever connection takes it.
        if defer is None:
            return self._submit("PUB", commands.pub(topic, raw), timeout, topic, 1, blocking)
        to_milliseconds(defer, "defer")
        return self._submit("DPUB", commands.dpub(topic, defer, raw), timeout, topic, 1, blocking)

    def multi_publish_async(
        self, topic: str, bodies: Iterable[bytes | str], timeout: float | None = None
    ) -> gevent.event.AsyncResult[bytes]:
        """Like :meth:`multi_publish` but returns an ``AsyncResult`` at once."""
        return self._multi_publish(topic, bodies, timeout).result

    def _multi_publish(
        self, topic: str, bodies: Iterable[bytes | str], timeout: float | None,
        blocking: bool = False,
    ) -> Attempt:  # fmt: skip
        topic = check_topic_name(topic)
        if isinstance(bodies, (bytes, str)):
            raise TypeError("multi_publish takes a list of bodies, not one bytes or str")
        # A list of bytes, the usual call, is built as it is: the join checks the
        # types. Anything else (a str, a generator, a limit broken) takes the
        # careful path, which converts every body and says what is wrong.
        raws: Sequence[Any] = bodies if isinstance(bodies, (list, tuple)) else ()
        data = self._mpub_data(topic, raws, False) if raws else None
        if data is None:
            raws = [b if type(b) is bytes else as_body(b) for b in bodies]
            data = cast(bytes, self._mpub_data(topic, raws, True))  # built, or raised
        # Built once, whatever connection takes it; each body copied once.
        return self._submit("MPUB", data, timeout, topic, len(raws), blocking)

    def _mpub_data(self, topic: str, bodies: Sequence[Any], careful: bool) -> bytes | None:
        """The whole MPUB of ``bodies`` (sizes checked against the limits), in one join.

        ``careful``: ``bodies`` are all ``bytes``, and a broken limit raises the
        error that says why. Otherwise ``None`` for anything but buffers of
        bytes within the limits (a ``str`` or ``None`` among them, a
        ``memoryview`` whose ``len`` is not its size, a body too large ...).
        """
        try:
            sizes = list(map(len, bodies))  # one pass; usually one size
        except TypeError:  # a body without a len: the careful path names it
            return None
        count = len(sizes)
        if not count:
            raise LocalProtocolError("multi_publish needs at least one message")
        size = sizes[0] if sizes.count(sizes[0]) == count else None  # the one size, if so
        smallest, largest = (size, size) if size is not None else (min(sizes), max(sizes))
        if smallest == 0 or largest > self.max_message_size:
            if not careful:
                return None
            self._check_message_size(smallest)  # raises the error that says why
            self._check_message_size(largest)
        total = commands.mpub_body_size(bodies, size)
        if total > self.max_body_size:
            if not careful:
                return None
            raise MessageTooLargeError(
                f"an MPUB body of {total} bytes ({count} messages) exceeds"
                f" max_body_size={self.max_body_size} (nsqd's --max-body-size); split the batch"
            )
        try:
            data = commands.mpub_command(topic, bodies, size)
        except TypeError:  # not a buffer (a str ...): never so when careful
            return None
        # "MPUB <topic>\n", the 4-byte size, the body: a buffer whose len() is
        # not its byte count (a memoryview of wider items) breaks the sum.
        return data if careful or len(data) == len(topic) + 10 + total else None

    def multi_publish_encoded(
        self, topic: str, payload: bytes | memoryview, timeout: float | None = None
    ) -> None:
        """MPUB a ready body; blocks until nsqd answers. Raises like :meth:`publish`.

        ``payload`` is the MPUB body: the 4-byte big-endian message count,
        then per message its 4-byte size and bytes. Only its total size is
        checked here (``max_body_size``); the caller checks each message
        against ``max_message_size``. For columnar sources that should not
        build a ``bytes`` per message (the Spark sink).
        """
        topic = check_topic_name(topic)
        if len(payload) > self.max_body_size:
            raise MessageTooLargeError(
                f"an MPUB body of {len(payload)} bytes exceeds max_body_size="
                f"{self.max_body_size} (nsqd's --max-body-size); split the batch"
            )
        count = int.from_bytes(bytes(payload[:4]), "big")  # the body's message count
        data = commands.mpub_encoded(topic, payload)
        self._wait(self._submit("MPUB", data, timeout, topic, count, True), timeout)

    def _check_message_size(self, size: int) -> None:
        if size == 0:
            raise LocalProtocolError("a message body cannot be empty: nsqd refuses it")
        if size > self.max_message_size:
            raise MessageTooLargeError(
                f"a message of {size} bytes exceeds max_message_size={self.max_message_size}"
                " (nsqd's --max-msg-size)"
            )

    def _submit(
        self, command: str, data: bytes, timeout: float | None, topic: str, messages: int,
        blocking: bool = False,
    ) -> Attempt:  # fmt: skip
        """Start one publish; a ``blocking`` call's goes out at once when it is the only one.

        A caller that publishes and waits, one at a time, gains a round
        trip's worth of overlap: nsqd works on the command while the caller
        sets up its wait. When other callers block on this producer (many
        greenlets publishing through it), their publishes come in batches,
        each woken by one batch of answers: this one leaves its send to the
        hub's flush, which sends the batch together. Sending each at once
        would split the batches, and once split they stay split.
        """
        if self._closed:
            raise ConnectionClosedError(",".join(self.addresses), "the producer is closed")
        if not self._started:
            raise ConnectionClosedError(
                ",".join(self.addresses), "the producer is not started: call start() first"
            )
        timeout = self.timeout if timeout is None else timeout
        attempt = Attempt(
            self, command, data, time.monotonic() + timeout, timeout, topic, messages
        )
        self._in_flight += 1
        self._dispatch(attempt, blocking and not self._blocked and not self._resuming)
        return attempt

    def _dispatch(self, attempt: Attempt, now: bool = False) -> None:
        """Send ``attempt`` on the next healthy connection it has not tried (``now``: at once)."""
        if attempt.ended:
            return
        healthy, tried = self._healthy, attempt.tried
        for _ in range(len(healthy)):  # the next one in turn not tried yet
            self._next = (self._next + 1) % len(healthy)
            conn = healthy[self._next]
            if conn not in tried:
                break
        else:
            self._park(attempt)
            return
        tried.add(conn)
        attempt.conn = conn
        try:
            conn.request_encoded(attempt, attempt.command, attempt.data, now)
        except (NSQConnectionError, LocalProtocolError) as exc:  # the connection just ended
            attempt.errors[conn.name] = exc
            self._dispatch(attempt, now)

    def _answered_with_error(
        self, attempt: Attempt, conn: Connection, error: BaseException
    ) -> None:
        """Retry on another connection when that may help; runs in a reader greenlet."""
        if attempt.ended:
            return
        retry = not self._closed and time.monotonic() < attempt.deadline
        if isinstance(error, _RETRYABLE) and retry:
            attempt.errors[conn.name] = error
            log.info("producer: retrying a publish after %s", error)
            self._dispatch(attempt)
        else:
            self._fail(attempt, error)

    def _park(self, attempt: Attempt) -> None:
        """No connection to try now: wait for a reconnect until the deadline."""
        remaining = attempt.deadline - time.monotonic()
        if remaining <= 0 or self._closed or self._wheel is None:
            self._give_up(attempt)
            return
        self._waiting.append(attempt)
        attempt.expiry = self._wheel.call_later(remaining, self._expire, attempt, owner=self)

    def _expire(self, attempt: Attempt) -> None:
        if attempt in self._waiting:
            self._waiting.remove(attempt)
            self._give_up(attempt)

    def _give_up(self, attempt: Attempt) -> None:
        errors = dict(attempt.errors)
        for address in self.addresses:
            if address not in errors and address in self._last_error:
                errors[address] = self._last_error[address]
        self._fail(attempt, NoConnectionsError(errors, "every nsqd failed or is unreachable"))

    def _fail(self, attempt: Attempt, error: BaseException | None) -> None:
        if not attempt.ended:
            error = error or RuntimeError("publish failed")
            attempt.failed(error)
            self._done(attempt, error)

    def _done(self, attempt: Attempt, error: BaseException | None) -> None:
        """Count the end of one publish (it has just ended)."""
        self._in_flight -= 1
        if attempt.wake is not None:  # its caller runs soon (see _submit)
            self._woken(attempt)
        started = attempt.deadline - attempt.timeout  # the time.monotonic() of the call
        self.count_publish(
            attempt.topic, _COUNTED_AS[attempt.command], attempt.messages, started, error
        )

