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
import math
import time
from collections import deque
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
from .protocol import as_body, check_topic_name, commands, mpub_body, to_milliseconds
from .timers import Timer, TimerWheel

__all__ = ["Producer", "error_code"]

log = logging.getLogger(__name__)

#: nsqd's defaults for --max-msg-size and --max-body-size, in bytes.
DEFAULT_MAX_MESSAGE_SIZE: int = ProducerConfig.max_message_size
DEFAULT_MAX_BODY_SIZE: int = ProducerConfig.max_body_size
_RETRYABLE = (NSQConnectionError, PubFailedError, MPubFailedError, DPubFailedError)
#: A blocking call gives up this long (seconds) after its attempt's deadline, so
#: an attempt parked without a connection fails with NoConnectionsError first.
_GRACE = 0.05
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
    """One publish call travelling over connections until it succeeds or gives up.

    It is also the :class:`~gnsqlite.conn.Waiter` of the connection it was
    last sent on (one at a time: it moves on only after that one failed),
    which the connection's reader calls directly.
    """

    __slots__ = (
        "blocked", "command", "conn", "data", "deadline", "errors", "messages", "producer",
        "result", "timeout", "topic", "tried",
    )  # fmt: skip

    def __init__(
        self, producer: Producer, command: str, data: bytes, deadline: float, timeout: float,
        topic: str, messages: int,
    ) -> None:  # fmt: skip
        self.producer = producer
        self.command = command  # "PUB", "MPUB" or "DPUB"
        self.topic = topic  # for the producer's counters
        self.messages = messages
        self.data = data  # the whole request, the same bytes for any connection
        self.result: gevent.event.AsyncResult[bytes] = gevent.event.AsyncResult()
        self.deadline = deadline  # time.monotonic() after which it is not retried
        self.timeout = timeout  # seconds: what the caller allowed
        self.errors: dict[str, BaseException] = {}
        self.tried: set[Connection] = set()
        self.conn: Connection | None = None  # where it was sent last
        self.blocked = False  # a caller waits in Producer._wait for it

    def set(self, value: bytes) -> None:
        """nsqd answered on :attr:`conn`."""
        if not self.result.ready():
            self.result.set(value)
            self.producer._done(self, None)

    def set_exception(self, exception: BaseException) -> None:
        """:attr:`conn` refused it or ended before answering."""
        conn = self.conn
        if conn is not None:
            self.producer._answered_with_error(self, conn, exception)


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
        # Attempts a caller blocks on, in the order the waits began: one wheel
        # timer (at the earliest deadline) fails the late ones, instead of a
        # gevent Timeout per call.
        self._timed: deque[_Attempt] = deque()
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
        # it with theirs (see _send_now).
        self._blocked = 0
        self._resuming = 0
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
        self._wait(self._send_now(self._publish(topic, body, defer, timeout)), timeout)

    def multi_publish(
        self, topic: str, bodies: Iterable[bytes | str], timeout: float | None = None
    ) -> None:
        """MPUB ``bodies`` atomically; blocks until nsqd answers. Raises like :meth:`publish`."""
        self._wait(self._send_now(self._multi_publish(topic, bodies, timeout)), timeout)

    def _send_now(self, attempt: _Attempt) -> _Attempt:
        """A blocking call's publish goes out at once when it is the only blocking caller.

        A caller that publishes and waits, one at a time, gains a round
        trip's worth of overlap: nsqd works on the command while the caller
        sets up its wait. When other callers block on this producer (many
        greenlets publishing through it), their publishes come in batches,
        each woken by one batch of answers: this one leaves its send to the
        hub's flush, which sends the batch together. Sending each at once
        would split the batches, and once split they stay split.
        """
        conn = attempt.conn
        if conn is not None and not self._blocked and not self._resuming:
            conn.flush()
        return attempt

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
        raw = body if type(body) is bytes else as_body(body)
        if not 0 < len(raw) <= self.max_message_size:
            self._check_message_size(len(raw))  # raises the error that says why
        # Built once, whatever connection takes it.
        if defer is None:
            return self._submit("PUB", commands.pub(topic, raw), timeout, topic, 1)
        to_milliseconds(defer, "defer")
        return self._submit("DPUB", commands.dpub(topic, defer, raw), timeout, topic, 1)

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
        raws: Sequence[bytes]
        if type(bodies) in (list, tuple) and set(map(type, bodies)) == {bytes}:
            raws = bodies  # type: ignore[assignment]  # all bytes already: no copy of the list
        else:
            raws = [b if type(b) is bytes else as_body(b) for b in bodies]
        if not raws:
            raise LocalProtocolError("multi_publish needs at least one message")
        sizes = set(map(len, raws))  # one pass; usually one size
        smallest, largest = min(sizes), max(sizes)
        self._check_message_size(smallest)
        self._check_message_size(largest)
        count = len(raws)
        total = 4 + 4 * count + (largest * count if len(sizes) == 1 else sum(map(len, raws)))
        if total > self.max_body_size:
            raise MessageTooLargeError(
                f"an MPUB body of {total} bytes ({len(raws)} messages) exceeds"
                f" max_body_size={self.max_body_size} (nsqd's --max-body-size); split the batch"
            )
        # Encoded once, whatever connection takes it; equal sizes in one join.
        payload = mpub_body(raws, largest if smallest == largest else None)
        return self._submit("MPUB", commands.mpub_encoded(topic, payload), timeout, topic, count)

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
        attempt = self._submit("MPUB", commands.mpub_encoded(topic, payload), timeout, topic, count)
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
        """Block until ``attempt`` is answered or its deadline (plus a grace) passed.

        ``timeout`` is what the call was given (already in the attempt's deadline).
        """
        result = attempt.result
        if not result.ready():
            timed = self._timed
            if timed and not self._closed and attempt.deadline + _GRACE >= self._deadline_at:
                # _watch's common case, inlined: the timer is armed early enough.
                while timed and timed[0].result.ready():
                    timed.popleft()
                timed.append(attempt)
            else:
                self._watch(attempt)
            attempt.blocked = True
            self._blocked += 1
            try:
                result.wait()
            finally:
                attempt.blocked = False
                if result.ready():
                    self._resuming -= 1  # moved from _blocked by _done()
                else:  # the wait was cut short (a Timeout, a kill)
                    self._blocked -= 1
        result.get(block=False)

    def _watch(self, attempt: _Attempt) -> None:
        """Fail ``attempt`` if it is still unanswered ``_GRACE`` s after its deadline."""
        if self._closed or self._wheel is None:
            self._fail(attempt, ConnectionClosedError(",".join(self.addresses), "producer closed"))
            return
        timed = self._timed
        while timed and timed[0].result.ready():  # answered ones leave, in order
            timed.popleft()
        timed.append(attempt)
        due = attempt.deadline + _GRACE
        if due < self._deadline_at:
            self._arm_deadline(due)

    def _arm_deadline(self, due: float) -> None:
        wheel = self._wheel
        if wheel is None:  # not started: nothing waits
            return
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        self._deadline_at = due
        self._deadline_timer = wheel.call_later(
            max(0.0, due - time.monotonic()), self._check_deadlines, owner=self
        )

    def _check_deadlines(self) -> None:
        """The deadline timer fired: fail the late attempts, arm for the next."""
        self._deadline_timer = None
        self._deadline_at = math.inf
        now = time.monotonic()
        kept: deque[_Attempt] = deque()
        late: list[_Attempt] = []
        next_due = math.inf
        for attempt in self._timed:
            if attempt.result.ready():
                continue
            due = attempt.deadline + _GRACE
            if due <= now:
                late.append(attempt)
            else:
                kept.append(attempt)
                next_due = min(next_due, due)
        self._timed = kept
        for attempt in late:
            if attempt in self._waiting:
                self._waiting.remove(attempt)
                self._give_up(attempt)
            else:
                self._fail(
                    attempt, NSQTimeoutError(f"no answer from nsqd within {attempt.timeout} s")
                )
        if kept and not self._closed:
            self._arm_deadline(next_due)

    def _submit(
        self, command: str, data: bytes, timeout: float | None, topic: str, messages: int
    ) -> _Attempt:
        if self._closed:
            raise ConnectionClosedError(",".join(self.addresses), "the producer is closed")
        if not self._started:
            raise ConnectionClosedError(
                ",".join(self.addresses), "the producer is not started: call start() first"
            )
        timeout = self.timeout if timeout is None else timeout
        attempt = _Attempt(
            self, command, data, time.monotonic() + timeout, timeout, topic, messages
        )
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
        attempt.conn = conn
        try:
            conn.request_encoded(attempt, attempt.command, attempt.data)
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
        if attempt.blocked:  # its caller runs soon (see _send_now)
            self._blocked -= 1
            self._resuming += 1
        started = attempt.deadline - attempt.timeout  # the time.monotonic() of the call
        self.count_publish(
            attempt.topic, attempt.command.lower(), attempt.messages, started, error
        )

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
