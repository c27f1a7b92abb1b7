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

Each connection answers nsqd's heartbeats by itself, so an idle producer
stays connected indefinitely; a connection that hears nothing for two
heartbeat intervals is treated as dead and reconnected.

:meth:`Producer.stats` counts what was published (commands and messages by
topic and command), the errors by code and the publishes waiting for an
answer; :meth:`Producer.health` is what a readiness probe needs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import gevent
import gevent.event
import gevent.pool

from .config import ConnectionConfig, ProducerConfig
from .conn import Connection
from .errors import (
    ConfigError,
    ConnectionClosedError,
    DPubFailedError,
    LocalProtocolError,
    MessageTooLargeError,
    MPubFailedError,
    NoConnectionsError,
    NSQConnectionError,
    NSQTimeoutError,
    PubFailedError,
    ServerError,
)
from .flow import Reconnect
from .health import ConnectionHealth, Health, build_health
from .net import normalize_addresses
from .protocol import as_body, check_topic_name, mpub_body, to_milliseconds
from .timers import TimerWheel

__all__ = ["Producer", "error_code"]

log = logging.getLogger(__name__)

#: nsqd's defaults for --max-msg-size and --max-body-size, in bytes.
DEFAULT_MAX_MESSAGE_SIZE: int = ProducerConfig.max_message_size
DEFAULT_MAX_BODY_SIZE: int = ProducerConfig.max_body_size
_RETRYABLE = (NSQConnectionError, PubFailedError, MPubFailedError, DPubFailedError)

Command = Callable[[Connection], bytes]
#: Called with ``(topic, command, seconds)`` when a publish is answered or fails.
PublishTiming = Callable[[str, str, float], None]


def error_code(error: BaseException) -> str:
    """The ``code`` a failed publish is counted under in :meth:`Producer.stats`.

    nsqd's ``E_*`` code for an error nsqd sent (``"E_BAD_TOPIC"``), else
    ``"no_connections"`` (no nsqd took it in time), ``"timeout"`` (sent, not
    answered in time), ``"closed"`` (the producer closed first) or
    ``"connection"`` (the connection broke and no retry was possible).
    """
    if isinstance(error, ServerError):
        return error.code
    if isinstance(error, NoConnectionsError):
        return "no_connections"
    if isinstance(error, ConnectionClosedError):
        return "closed"
    if isinstance(error, NSQTimeoutError):
        return "timeout"
    if isinstance(error, NSQConnectionError):
        return "connection"
    return type(error).__name__


class _Attempt:
    """One publish call travelling over connections until it succeeds or gives up."""

    __slots__ = (
        "command", "deadline", "errors", "kind", "messages", "result", "started", "topic", "tried"
    )

    def __init__(
        self, command: Command, started: float, deadline: float, topic: str, kind: str,
        messages: int,
    ) -> None:  # fmt: skip
        self.command = command  # builds the request bytes with a connection's protocol
        self.result: gevent.event.AsyncResult[bytes] = gevent.event.AsyncResult()
        self.started = started
        self.deadline = deadline
        self.topic = topic
        self.kind = kind  # "pub", "mpub" or "dpub"
        self.messages = messages
        self.errors: dict[str, BaseException] = {}
        self.tried: set[Connection] = set()


class _Reply:
    """The :class:`~gnsqlite.conn.Waiter` of one attempt on one connection.

    The connection's reader calls it directly, so an answer reaches the
    attempt without a detour through the hub.
    """

    __slots__ = ("attempt", "conn", "producer")

    def __init__(self, producer: Producer, attempt: _Attempt, conn: Connection) -> None:
        self.producer = producer
        self.attempt = attempt
        self.conn = conn

    def set(self, value: bytes) -> None:
        if not self.attempt.result.ready():
            self.attempt.result.set(value)
            self.producer._done(self.attempt, None)

    def set_exception(self, exception: BaseException) -> None:
        self.producer._answered_with_error(self.attempt, self.conn, exception)


class Producer:
    """Publishes to the nsqd at ``nsqd_tcp_addresses`` (``"host:port"`` strings).

    ``timeout`` (seconds) bounds each blocking call, retries included.
    ``reconnect_interval`` and ``max_reconnect_interval`` (seconds) bound
    the jittered exponential backoff between reconnection attempts.
    Connection options (``heartbeat_interval``, ``tls_v1``, ``snappy``,
    ``auth_secret`` ...) are passed as keywords or as ``config``.

    The constructor opens nothing; :meth:`start` connects.
    """

    def __init__(
        self,
        nsqd_tcp_addresses: str | Iterable[str],
        *,
        config: ConnectionConfig | None = None,
        timeout: float = 5.0,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        reconnect_interval: float = 1.0,
        max_reconnect_interval: float = 60.0,
        **options: Any,
    ) -> None:
        addresses = normalize_addresses("nsqd_tcp_addresses", nsqd_tcp_addresses)
        if not addresses:
            raise ConfigError("nsqd_tcp_addresses is empty: give at least one 'host:port'")
        if config is not None and options:
            raise ConfigError("pass connection options either as config= or as keywords, not both")
        self.config = config if config is not None else ConnectionConfig.from_mapping(options)
        #: The producer's own options, validated together.
        self.producer_config = settings = ProducerConfig(
            timeout=timeout,
            max_message_size=max_message_size,
            max_body_size=max_body_size,
            reconnect_interval=reconnect_interval,
            max_reconnect_interval=max_reconnect_interval,
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
        self._waiting: list[_Attempt] = []
        self._group = gevent.pool.Group()
        self._wheel: TimerWheel | None = None
        self._started = False
        self._closed = False
        self._connected = gevent.event.Event()
        # stats(): (topic, command) -> [commands answered OK, messages in them]
        self._published: dict[tuple[str, str], list[int]] = {}
        self._errors: dict[str, int] = {}  # error_code() -> failed publishes
        self._in_flight = 0  # publishes waiting for an answer (or a connection)
        self._publish_timing: PublishTiming | None = None

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
        self._wait(self._publish(topic, body, defer, timeout), timeout)

    def multi_publish(
        self, topic: str, bodies: Iterable[bytes | str], timeout: float | None = None
    ) -> None:
        """MPUB ``bodies`` atomically; blocks until nsqd answers. Raises like :meth:`publish`."""
        self._wait(self._multi_publish(topic, bodies, timeout), timeout)

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
        self, topic: str, body: bytes | str, defer: float | None, timeout: float | None
    ) -> _Attempt:
        topic = check_topic_name(topic)
        raw = as_body(body)
        self._check_message_size(len(raw))
        command: Command
        if defer is None:
            command = lambda conn: conn.protocol.pub(topic, raw)  # noqa: E731
        else:
            to_milliseconds(defer, "defer")
            command = lambda conn: conn.protocol.dpub(topic, defer, raw)  # noqa: E731
        return self._submit(command, timeout, topic, "pub" if defer is None else "dpub", 1)

    def multi_publish_async(
        self, topic: str, bodies: Iterable[bytes | str], timeout: float | None = None
    ) -> gevent.event.AsyncResult[bytes]:
        """Like :meth:`multi_publish` but returns an ``AsyncResult`` at once."""
        return self._multi_publish(topic, bodies, timeout).result

    def _multi_publish(
        self, topic: str, bodies: Iterable[bytes | str], timeout: float | None
    ) -> _Attempt:
        topic = check_topic_name(topic)
        if isinstance(bodies, (bytes, str)):
            raise TypeError("multi_publish takes a list of bodies, not one bytes or str")
        raws = [b if type(b) is bytes else as_body(b) for b in bodies]
        if not raws:
            raise LocalProtocolError("multi_publish needs at least one message")
        sizes = list(map(len, raws))
        self._check_message_size(min(sizes))
        self._check_message_size(max(sizes))
        total = 4 + 4 * len(sizes) + sum(sizes)
        if total > self.max_body_size:
            raise MessageTooLargeError(
                f"an MPUB body of {total} bytes ({len(raws)} messages) exceeds"
                f" max_body_size={self.max_body_size} (nsqd's --max-body-size); split the batch"
            )
        payload = mpub_body(raws)  # encoded once, whatever connection takes it
        return self._submit(
            lambda conn: conn.protocol.mpub_encoded(topic, payload), timeout, topic, "mpub",
            len(raws),
        )  # fmt: skip

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
        attempt = self._submit(
            lambda conn: conn.protocol.mpub_encoded(topic, payload), timeout, topic, "mpub", count
        )
        self._wait(attempt, timeout)

    def _check_message_size(self, size: int) -> None:
        if size == 0:
            raise LocalProtocolError("a message body cannot be empty: nsqd refuses it")
        if size > self.max_message_size:
            raise MessageTooLargeError(
                f"a message of {size} bytes exceeds max_message_size={self.max_message_size}"
                " (nsqd's --max-msg-size)"
            )

    def _wait(self, attempt: _Attempt, timeout: float | None) -> None:
        timeout = self.timeout if timeout is None else timeout
        # A little longer than the attempt's own deadline, so a parked attempt
        # fails with NoConnectionsError (naming each nsqd) rather than a timeout.
        attempt.result.wait(timeout + 0.05)
        if not attempt.result.ready():
            if attempt in self._waiting:
                self._waiting.remove(attempt)
                self._give_up(attempt)
            else:
                self._fail(attempt, NSQTimeoutError(f"no answer from nsqd within {timeout} s"))
        attempt.result.get(block=False)

    def _submit(
        self, command: Command, timeout: float | None, topic: str, kind: str, messages: int
    ) -> _Attempt:
        if self._closed:
            raise ConnectionClosedError(",".join(self.addresses), "the producer is closed")
        if not self._started:
            raise ConnectionClosedError(
                ",".join(self.addresses), "the producer is not started: call start() first"
            )
        timeout = self.timeout if timeout is None else timeout
        now = time.monotonic()
        attempt = _Attempt(command, now, now + timeout, topic, kind, messages)
        self._in_flight += 1
        self._dispatch(attempt)
        return attempt

    def _pick(self, attempt: _Attempt) -> Connection | None:
        healthy = self._healthy
        for _ in range(len(healthy)):
            self._next = (self._next + 1) % len(healthy)
            conn = healthy[self._next]
            if conn not in attempt.tried:
                return conn
        return None

    def _dispatch(self, attempt: _Attempt) -> None:
        if attempt.result.ready():
            return
        conn = self._pick(attempt)
        if conn is None:
            self._park(attempt)
            return
        attempt.tried.add(conn)
        try:
            conn.request(_Reply(self, attempt, conn), attempt.command(conn))
        except (NSQConnectionError, LocalProtocolError) as exc:  # the connection just ended
            attempt.errors[conn.name] = exc
            self._dispatch(attempt)

    def _answered_with_error(
        self, attempt: _Attempt, conn: Connection, error: BaseException
    ) -> None:
        """Retry on another connection when that may help; runs in a reader greenlet."""
        if attempt.result.ready():
            return
        retry = not self._closed and time.monotonic() < attempt.deadline
        if isinstance(error, _RETRYABLE) and retry:
            attempt.errors[conn.name] = error
            log.info("producer: retrying a publish after %s", error)
            self._dispatch(attempt)
        else:
            self._fail(attempt, error)

    def _park(self, attempt: _Attempt) -> None:
        """No connection to try now: wait for a reconnect until the deadline."""
        remaining = attempt.deadline - time.monotonic()
        if remaining <= 0 or self._closed or self._wheel is None:
            self._give_up(attempt)
            return
        self._waiting.append(attempt)
        self._wheel.call_later(remaining, self._expire, attempt, owner=self)

    def _expire(self, attempt: _Attempt) -> None:
        if attempt in self._waiting:
            self._waiting.remove(attempt)
            self._give_up(attempt)

    def _give_up(self, attempt: _Attempt) -> None:
        errors = dict(attempt.errors)
        for address in self.addresses:
            if address not in errors and address in self._last_error:
                errors[address] = self._last_error[address]
        self._fail(attempt, NoConnectionsError(errors, "every nsqd failed or is unreachable"))

    def _fail(self, attempt: _Attempt, error: BaseException | None) -> None:
        if not attempt.result.ready():
            error = error or RuntimeError("publish failed")
            attempt.result.set_exception(error)
            self._done(attempt, error)

    def _done(self, attempt: _Attempt, error: BaseException | None) -> None:
        """Count the end of one publish (the result was just set)."""
        self._in_flight -= 1
        self.count_publish(attempt.topic, attempt.kind, attempt.messages, attempt.started, error)

    # -- counters --------------------------------------------------------------

    def count_publish(
        self,
        topic: str,
        command: str,
        messages: int,
        started: float | None,
        error: BaseException | None,
    ) -> None:
        """Count one publish that ended: answered OK (``error`` ``None``) or failed.

        The producer calls it itself; a front end that publishes on one of
        its connections directly (the pynsq ``Writer``) calls it too, so that
        :meth:`stats` counts everything. ``started`` is the
        ``time.monotonic()`` of the send (``None``: not timed). Does not block.
        """
        if error is None:
            counts = self._published.get((topic, command))
            if counts is None:
                counts = self._published[(topic, command)] = [0, 0]
            counts[0] += 1
            counts[1] += messages
        else:
            code = error_code(error)
            self._errors[code] = self._errors.get(code, 0) + 1
        timing = self._publish_timing
        if timing is not None and started is not None:
            timing(topic, command, time.monotonic() - started)

    def track_in_flight(self, change: int) -> None:
        """Add ``change`` to the publishes waiting for an answer (for a front end, as above)."""
        self._in_flight += change

    def set_publish_timing(self, timing: PublishTiming | None) -> None:
        """Call ``timing(topic, command, seconds)`` when a publish ends (``None``: stop).

        ``seconds`` runs from the call to nsqd's answer or the failure,
        retries included. It runs in the greenlet that saw the answer (a
        connection's reader): it must not block. :mod:`gnsqlite.metrics`
        uses it for its histogram.
        """
        self._publish_timing = timing

    def stats(self) -> dict[str, Any]:
        """What the producer published and how its connections are; does not block.

        ``connections``: every address with ``connected`` (it can publish
        now) and ``last_error`` (the text of the last error, or ``None``).
        ``publishes``: one row per topic and command (``"pub"``, ``"mpub"``,
        ``"dpub"``) with ``count`` (commands nsqd answered ``OK``) and
        ``messages`` (the messages in them). ``errors``: failed publishes by
        :func:`error_code`. ``in_flight``: publishes waiting for an answer or
        a connection. Counts are cumulative since the producer was built;
        ``totals`` sums them.
        """
        up = {conn.name for conn in self._healthy}
        publishes = [
            {"topic": topic, "command": command, "count": counts[0], "messages": counts[1]}
            for (topic, command), counts in sorted(self._published.items())
        ]
        return {
            "connections": [
                {
                    "address": address,
                    "connected": address in up,
                    "last_error": (
                        str(self._last_error[address]) if address in self._last_error else None
                    ),
                }
                for address in self.addresses
            ],
            "publishes": publishes,
            "errors": dict(sorted(self._errors.items())),
            "in_flight": self._in_flight,
            "totals": {
                "publishes": sum(p["count"] for p in publishes),
                "messages": sum(p["messages"] for p in publishes),
                "errors": sum(self._errors.values()),
                "in_flight": self._in_flight,
            },
        }

    def health(self) -> Health:
        """Whether the producer can publish now, for a readiness probe; does not block.

        ``ok`` when started, not closed and connected to at least one nsqd.
        Per address: connected or not, and the seconds since anything was read
        from it (heartbeats included). Sends nothing.
        """
        now = time.monotonic()
        up = {conn.name: conn for conn in self._healthy}
        rows = [
            ConnectionHealth(
                address,
                address in up,
                None,
                now - up[address].last_received if address in up else None,
            )
            for address in self.addresses
        ]
        return build_health(started=self._started, closed=self._closed, connections=rows)
