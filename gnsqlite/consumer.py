"""The Consumer: subscribe to a topic/channel on many nsqd and handle its messages.

::

    def handle(message):
        print(message.body)          # returning finishes; raising requeues

    consumer = Consumer("clicks", "archive", handle,
                        lookupd_http_addresses=["127.0.0.1:4161"], max_in_flight=50)
    consumer.start()
    ...
    consumer.close()                 # drains: RDY 0, CLS, running handlers finish

How the work is split:

* each :class:`~gnsqlite.conn.Connection` has one reader greenlet that only
  decodes frames and queues messages; it never runs handler code;
* a pool of at most ``concurrency`` worker greenlets takes messages from the
  queue and runs the handler (workers are reused, not spawned per message);
* RDY counts are decided by the pure :class:`~gnsqlite.flow.RdyPlanner`,
  backoff by the pure :class:`~gnsqlite.flow.Backoff`;
* heartbeat checks, RDY redistribution, backoff windows, lookupd polls and
  reconnects are timers on the hub's :class:`~gnsqlite.timers.TimerWheel`,
  all owned by the consumer and cancelled by :meth:`Consumer.close`.

Nothing is lost: every message is finished, requeued, or handed to
``on_giving_up`` (then finished). With ``dead_letter_topic``, a message given
up is first published there (see :mod:`gnsqlite.deadletter`), and requeued
if that fails. A message whose connection died before it was answered is
redelivered by nsqd.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable
from time import perf_counter  # bound once: the handler timing reads it twice a message
from typing import Any

import gevent
import gevent.event
import gevent.pool
import gevent.queue

from .batch import Batch, BatchConfig, Batcher, BatchHandler, messages_of
from .config import ConnectionConfig, ConsumerConfig, split_options
from .conn import Connection
from .deadletter import DeadLetterPublisher
from .discovery import LookupdPoller
from .errors import ConfigError, NSQConnectionError, NSQError, ServerError
from .flow import Backoff, Pause, Probe, RdyPlanner, Reconnect, Resume, make_backoff_strategy
from .health import ConnectionHealth, Health, build_health
from .message import Message, RequeueMessage, delivered
from .net import normalize_address, normalize_addresses
from .protocol import Message as WireMessage
from .protocol import check_channel_name, check_topic_name
from .timers import Timer, TimerWheel

__all__ = ["Consumer", "Handler", "GiveUpHook"]

log = logging.getLogger(__name__)

Handler = Callable[[Message], Any]
GiveUpHook = Callable[[Message], Any]
_PREVIEW = 64
#: The counters ``stats()["by_nsqd"]`` keeps per nsqd, cumulative across reconnects.
COUNTERS = ("received", "finished", "requeued", "given_up")
#: The reconnect policy's key for lookupd polls (an address always has a ':').
_LOOKUPD = "lookupd"


def log_giving_up(message: Message) -> None:
    """The default ``on_giving_up``: a WARNING with id, attempts and a body preview."""
    preview = message.body[:_PREVIEW]
    more = "..." if len(message.body) > _PREVIEW else ""
    log.warning(
        "giving up on message %s from %s after %d attempts: %r%s",
        message.id,
        message.nsqd,
        message.attempts,
        preview,
        more,
    )


class _Link:
    """One subscribed connection: what the consumer alone knows of it.

    Its flow (RDY, in-flight count, when the last message came) is the
    planner's :class:`~gnsqlite.flow.ConnFlow` of the same name, and nowhere
    else; ``unanswered`` holds the messages behind that in-flight count, so
    that close() can requeue them and a lost connection drops them at once.
    """

    __slots__ = (
        "address",
        "conn",
        "discovered",
        "finished",
        "msg_timeout",
        "received",
        "requeued",
        "unanswered",
    )

    def __init__(self, address: str, conn: Connection, discovered: bool) -> None:
        self.address = address
        self.conn = conn
        self.discovered = discovered
        self.msg_timeout = conn.msg_timeout  # negotiated at connect: read once, not per message
        self.received = 0
        self.finished = 0
        self.requeued = 0
        self.unanswered: set[Message] = set()  # received, not yet finished or requeued


class Consumer:
    """Consumes ``topic`` on ``channel``; see the module docstring.

    ``handler(message)`` runs in a worker greenlet: returning finishes the
    message, raising requeues it with backoff, raising
    :class:`~gnsqlite.message.RequeueMessage` requeues it as asked, and
    ``message.enable_async()`` leaves the answer to the user (from any
    greenlet). A subclass may override :meth:`handle` instead of passing a
    handler.

    Options (durations in seconds): ``max_in_flight`` (RDY budget over all
    connections), ``concurrency`` (handler greenlets; default
    ``max_in_flight``), ``max_attempts`` (0: unlimited), ``requeue_delay``
    (times the attempts, capped by ``max_requeue_delay``), ``backoff``
    (``"exponential"``, ``"full_jitter"``, ``None``, or an object with
    ``duration(level)``), ``max_backoff_duration``,
    ``lookupd_poll_interval``, ``lookupd_poll_jitter`` (fraction of the
    interval), ``low_rdy_idle_timeout`` and ``low_rdy_timeout`` (when RDY
    rotates: how long an idle, and any, connection keeps it),
    ``rdy_redistribute_interval`` (how often RDY is shared out again, by
    demand or in turn),
    ``reconnect_interval``/``max_reconnect_interval`` (static nsqd, and lookupd
    polls after every lookupd failed),
    ``on_giving_up(message)``; ``dead_letter_topic``, ``dead_letter_envelope``,
    ``dead_letter_nsqd``, ``dead_letter_timeout`` (see
    :class:`~gnsqlite.config.ConsumerConfig` and :mod:`gnsqlite.deadletter`).
    A message past ``max_attempts`` is published to the dead-letter topic,
    then handed to ``on_giving_up``, then finished; if the publish fails it
    is requeued and the hook does not run.

    ``batch_handler(messages)`` instead of ``handler`` takes lists of up to
    ``batch_size`` messages (at most ``max_in_flight``), handed over when
    full, ``batch_timeout`` seconds after their first message, or when the
    consumer is starved; see :mod:`gnsqlite.batch`.

    Other keywords are connection options (``heartbeat_interval``,
    ``tls_v1``, ``snappy``, ``auth_secret`` ...), or pass
    ``connection_config``.

    The constructor opens no socket and starts no greenlet.
    """

    def __init__(
        self,
        topic: str,
        channel: str,
        handler: Handler | None = None,
        *,
        nsqd_tcp_addresses: str | Iterable[str] = (),
        lookupd_http_addresses: str | Iterable[str] = (),
        backoff: Any = "exponential",
        on_giving_up: GiveUpHook | None = None,
        connection_config: ConnectionConfig | None = None,
        batch_handler: BatchHandler | None = None,
        batch_size: int | None = None,
        batch_timeout: float | None = None,
        **options: Any,
    ) -> None:
        self.topic = check_topic_name(topic)
        self.channel = check_channel_name(channel)
        self._handler = handler
        self.nsqd_tcp_addresses = normalize_addresses("nsqd_tcp_addresses", nsqd_tcp_addresses)
        self.lookupd_http_addresses = normalize_addresses(
            "lookupd_http_addresses", lookupd_http_addresses
        )
        if not self.nsqd_tcp_addresses and not self.lookupd_http_addresses:
            raise ConfigError(
                "give at least one address: nsqd_tcp_addresses=['host:4150'] or"
                " lookupd_http_addresses=['host:4161']"
            )
        consumer_opts, conn_opts = split_options(
            options, (ConsumerConfig, ConnectionConfig), "Consumer"
        )
        if connection_config is not None and conn_opts:
            raise ConfigError("pass connection options as connection_config= or keywords, not both")
        self.config = ConsumerConfig(**consumer_opts)
        self.connection_config = (
            connection_config if connection_config is not None else ConnectionConfig(**conn_opts)
        )
        self._strategy = make_backoff_strategy(backoff)
        self.on_giving_up: GiveUpHook = on_giving_up if on_giving_up is not None else log_giving_up
        self._dead_letters = DeadLetterPublisher.for_consumer(
            self.topic, self.channel, self.config, self.connection_config
        )
        batch = BatchConfig.for_consumer(
            handler, batch_handler, batch_size, batch_timeout, self.config.max_in_flight
        )
        self._batcher = (
            Batcher(
                batch_handler,
                batch,
                dispatch=self._enqueue,
                is_starved=self.is_starved,
                give_up=self._give_up,
                max_attempts=self.config.max_attempts,
                failed=None if self._dead_letters is None else self._dead_letters.handler_failed,
            )
            if batch is not None and batch_handler is not None
            else None
        )
        self._concurrency = self.config.concurrency
        self._rng = random.Random()
        self._planner = RdyPlanner(
            self.config.max_in_flight,
            self.config.low_rdy_idle_timeout,
            self._rng,
            low_rdy_timeout=self.config.low_rdy_timeout,
        )
        self._backoff = (
            Backoff(self._strategy, self.config.max_backoff_duration)
            if self._strategy is not None
            else None
        )
        self._links: dict[str, _Link] = {}
        self._connecting: set[str] = set()
        self._reconnect = Reconnect(
            self.config.reconnect_interval, self.config.max_reconnect_interval, self._rng
        )
        self._reconnect_timers: dict[str, Timer] = {}  # one pending retry per address
        self._queue: gevent.queue.Queue[Message | Batch | None] = gevent.queue.Queue()
        self._workers = gevent.pool.Pool()
        self._idle_workers = 0
        self._running: dict[Any, Message | Batch] = {}  # worker greenlet -> what it handles
        self._poll_timer: Timer | None = None
        self._tasks = gevent.pool.Group()
        self._wheel: TimerWheel | None = None
        self._poller: LookupdPoller | None = None
        self._started = False
        self._closing = False
        self._stopped = gevent.event.Event()
        self._drained = gevent.event.Event()
        #: Set while :meth:`is_starved` is true: a batching handler waits on it.
        self.starved = gevent.event.Event()
        self._starved_names = self._planner.starved_names  # the planner's live set
        self._starved_flag = False  # what ``starved`` was last set to
        #: Set while at least one connection is subscribed (:attr:`connections`).
        self.connected = gevent.event.Event()
        self._observers: list[Callable[[Message], None]] = []
        #: handle() is Consumer.handle: the worker calls the handler directly.
        self._plain_handle = type(self).handle is Consumer.handle
        # Counts of connections that went away, and messages given up, per nsqd:
        # with the live links' counts they make the cumulative stats()["by_nsqd"].
        self._retired: dict[str, dict[str, int]] = {}
        self._handler_timing: Callable[[float], None] | None = None

    def __repr__(self) -> str:
        return f"<Consumer {self.topic}/{self.channel} conns={len(self._links)}>"

    def __enter__(self) -> Consumer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the handler ---------------------------------------------------------

    def handle(self, message: Message) -> Any:
        """Handle one message; the default calls the ``handler`` given to the constructor."""
        if self._handler is None:
            raise ConfigError("no handler: pass handler= or override Consumer.handle")
        return self._handler(message)

    def on_heartbeat(self, conn: Connection) -> None:
        """Called after each heartbeat nsqd sends on ``conn`` (about every
        ``heartbeat_interval`` seconds); override to observe liveness.

        Runs in the connection's reader greenlet: it must not block (spawn a
        greenlet for anything slow). The default does nothing.
        """

    def set_handler(self, handler: Handler) -> None:
        """Replace the handler (takes effect for the next message)."""
        self._handler = handler

    def add_message_observer(self, observer: Callable[[Message], None]) -> None:
        """Call ``observer(message)`` for every message received (a dashboard's tail).

        It runs in the connection's reader greenlet, before the handler: it
        must not block and must not answer the message. Its exceptions are
        logged and ignored.
        """
        self._observers.append(observer)

    def remove_message_observer(self, observer: Callable[[Message], None]) -> None:
        """Stop calling ``observer``; a no-op if it was not added."""
        if observer in self._observers:
            self._observers.remove(observer)

    def set_handler_timing(self, timing: Callable[[float], None] | None) -> None:
        """Call ``timing(seconds)`` after each handler call (``None``: stop).

        ``seconds`` is how long the handler ran (a handler that raised
        included; an async message's later answer is not); with a
        ``batch_handler``, how long each batch call ran. It runs in the
        worker greenlet: it must not block. :mod:`gnsqlite.metrics` uses it
        for its histogram; without it the consumer reads no clock for this.
        """
        self._handler_timing = timing

    # -- lifecycle -------------------------------------------------------------

    @property
    def concurrency(self) -> int:
        """How many handler greenlets may run at once."""
        return self._concurrency or max(1, self._planner.max_in_flight)

    def start(self) -> None:
        """Start connecting and consuming. Does not block; safe to call twice."""
        if self._closing:
            raise NSQConnectionError(f"{self.topic}/{self.channel}", "the consumer is closed")
        if self._started:
            return
        if self._handler is None and self._batcher is None and type(self).handle is Consumer.handle:
            raise ConfigError("no handler: pass handler= or override Consumer.handle")
        self._started = True
        wheel = self._wheel = TimerWheel.for_hub()
        if self._batcher is not None:
            self._batcher.start(wheel)
        interval = self.connection_config.heartbeat_interval
        if interval is not None:
            wheel.call_every(interval / 2, self._check_alive, owner=self)
        wheel.call_every(self.config.rdy_redistribute_interval, self._redistribute, owner=self)
        for address in self.nsqd_tcp_addresses:
            self._spawn_connect(address, discovered=False)
        if self.lookupd_http_addresses:
            self._poller = LookupdPoller(
                self.topic, self.lookupd_http_addresses, self.config.lookupd_request_timeout
            )
            self._tasks.spawn(self._poll)

    def close(self, timeout: float = 30.0) -> None:
        """Drain and stop; blocks up to about ``timeout`` seconds. Safe to call twice.

        Sends ``RDY 0`` and ``CLS`` to every nsqd, requeues messages received
        but not started, lets running handlers (and async messages) finish
        and answer until the timeout, requeues what is still unanswered,
        then closes the connections. Afterwards no greenlet or timer of the
        consumer remains. Called from a handler, it does not wait for that
        handler, whose message is requeued (its worker ends when it returns).
        """
        if self._closing:
            self._stopped.wait(timeout)
            return
        self._closing = True
        deadline = time.monotonic() + timeout
        if self._wheel is not None:
            self._wheel.cancel_owner(self)
        self._tasks.kill(block=True)
        links = list(self._links.values())
        # Through the planner, so no later answer or lost connection tops RDY up again.
        self._send_rdy(self._planner.pause())
        # close() may be called from a handler: its worker is not waited for,
        # and its message cannot be finished before the connections close.
        current = gevent.getcurrent()
        _requeue_now(self._running.get(current))
        for link in links:
            self._quietly(link.conn.start_close)
        if self._batcher is not None:
            self._batcher.close()  # the batch being collected is requeued
        self._requeue_queued()
        workers = [g for g in self._workers if g is not current]
        for _ in workers:
            self._queue.put(None)
        gevent.joinall(workers, timeout=max(0.0, deadline - time.monotonic()))
        if self._in_flight() > 0:
            self._drained.clear()
            if self._in_flight() > 0:
                self._drained.wait(max(0.0, deadline - time.monotonic()))
        gevent.killall([g for g in self._workers if g is not current], block=True)
        if self._dead_letters is not None:
            self._dead_letters.close()
        # Unanswered messages, async ones included: requeued rather than left
        # to time out in nsqd (which keeps them in flight after we leave).
        for link in list(self._links.values()):  # running handlers' messages included
            for message in list(link.unanswered):
                if not message.has_responded:
                    message.requeue(0.0, backoff=False)
        self._running.clear()
        self._requeue_queued()
        for link in links:
            link.conn.close(max(0.1, deadline - time.monotonic()))
        for link in self._links.values():
            self._retire(link)
        if self._batcher is not None:
            self._batcher.stop()
        self._links.clear()
        self.connected.clear()
        self.starved.clear()
        self._starved_flag = False
        self._stopped.set()

    def join(self, timeout: float | None = None) -> bool:
        """Block until the consumer has been closed; ``True`` if it has within ``timeout`` s."""
        return bool(self._stopped.wait(timeout))

    @property
    def closed(self) -> bool:
        """True once :meth:`close` finished."""
        return self._stopped.is_set()

    # -- flow --------------------------------------------------------------------

    @property
    def max_in_flight(self) -> int:
        """The RDY budget over all connections."""
        return self._planner.max_in_flight

    def set_max_in_flight(self, max_in_flight: int) -> None:
        """Change the RDY budget at run time; 0 pauses the flow. Does not block."""
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int):
            raise ConfigError(f"max_in_flight={max_in_flight!r} must be an int")
        if max_in_flight < 0:
            raise ConfigError(f"max_in_flight={max_in_flight!r} is out of range: use 0 or more")
        # In backoff the planner keeps its mode (RDY 0, or the one probe) and
        # applies the new budget when the flow resumes.
        self._send_rdy(self._planner.set_max_in_flight(max_in_flight, time.monotonic()))

    def is_starved(self) -> bool:
        """True when a connection's in-flight count reached 85% of its last RDY.

        A batching handler processes its batch then (see ``starved``).
        """
        return self._planner.is_starved()

    def wait_starved(self, timeout: float | None = None) -> bool:
        """Block until the consumer is starved; ``True`` if it is within ``timeout`` s."""
        return bool(self.starved.wait(timeout))

    def _update_starved(self) -> None:
        starved = self._starved_flag = bool(self._starved_names)
        if starved:
            if not self.starved.is_set():
                self.starved.set()
                if self._batcher is not None:
                    self._batcher.starved()
        elif self.starved.is_set():
            self.starved.clear()

    def _in_flight(self) -> int:
        return sum(f.in_flight for f in self._planner.conns.values())

    def _send_rdy(self, commands: list[tuple[str, int]]) -> None:
        """Send the planner's RDY commands, then bring ``starved`` up to date.

        Every change of the planner goes through here (RDY counts and in-flight
        counts alike), so this is the one place the Event follows them.
        """
        for name, count in commands:
            link = self._links.get(name)
            if link is not None:
                try:  # _quietly, inlined: once per message at max_in_flight 1
                    link.conn.ready(count)
                except NSQConnectionError as exc:
                    log.debug("%s: not sent (%s); nsqd redelivers what is unanswered", self, exc)
        self._update_starved()  # a new last RDY can start or end starvation

    def _redistribute(self) -> None:
        self._send_rdy(self._planner.redistribute(time.monotonic()))

    def _apply_backoff(self, action: Pause | Probe | Resume | None) -> None:
        if action is None or self._closing:
            return
        if isinstance(action, Pause):
            log.info("%s: backing off for %.3f s", self, action.duration)
            self._send_rdy(self._planner.pause())
            if self._wheel is not None:
                self._wheel.call_later(action.duration, self._window_ended, owner=self)
        elif isinstance(action, Probe):
            self._send_rdy(self._planner.probe())
        else:
            log.info("%s: backoff over, resuming the full flow", self)
            self._send_rdy(self._planner.resume(time.monotonic()))

    def _window_ended(self) -> None:
        if self._backoff is not None:
            self._apply_backoff(self._backoff.window_ended(time.monotonic()))

    # -- connections -------------------------------------------------------------

    def _spawn_connect(self, address: str, discovered: bool) -> None:
        if self._closing or address in self._connecting or address in self._links:
            return
        self._connecting.add(address)
        self._planner.set_connecting(len(self._connecting))
        self._tasks.spawn(self._connect, address, discovered)

    def _connect(self, address: str, discovered: bool) -> None:
        conn = Connection(
            address,
            self.connection_config,
            on_message=self._on_message,
            on_error=self._on_error,
            on_close=self._on_close,
            on_heartbeat=self.on_heartbeat,
        )
        try:
            conn.connect()
            conn.subscribe(self.topic, self.channel, timeout=self.connection_config.connect_timeout)
        except (NSQError, OSError, ValueError) as exc:
            self._connecting.discard(address)
            self._send_rdy(self._planner.set_connecting(len(self._connecting), time.monotonic()))
            conn.close(0)
            log.warning("%s: cannot subscribe on %s: %s", self, address, exc)
            if not discovered:
                self._schedule_reconnect(address)
            return
        except BaseException:  # GreenletExit from close(): leave no connection behind
            self._connecting.discard(address)
            conn.close(0)
            raise
        self._connecting.discard(address)
        # No rebalance here: add() below shares the budget out with this one counted.
        self._planner.connecting = len(self._connecting)
        if self._closing:
            conn.close()
            return
        self._reconnect.succeeded(address)
        self._links[conn.name] = _Link(address, conn, discovered)
        if conn.closed:
            # It ended after SUB's OK but before this greenlet resumed: its
            # on_close found no link, so handle the loss now.
            self._on_close(conn, conn.error or NSQConnectionError(conn.name, "lost on subscribe"))
            return
        log.info("%s: subscribed on %s", self, conn.name)
        self.connected.set()
        self._send_rdy(self._planner.add(conn.name, conn.max_rdy_count, time.monotonic()))

    def _on_close(self, conn: Connection, error: Exception | None) -> None:
        link = self._links.get(conn.name)
        if link is None or link.conn is not conn:
            return
        del self._links[conn.name]
        self._retire(link)
        if not self._links:
            self.connected.clear()
        # Its unanswered messages, gone with the link, can no longer be
        # answered: nsqd redelivers them. Those no handler has started
        # leave the queue now, so they are never handled twice.
        self._send_rdy(self._planner.remove(conn.name, time.monotonic()))
        self._drop_queued(conn)
        if self._in_flight() == 0:
            self._drained.set()
        if self._closing or error is None:
            return
        log.warning("%s: lost %s: %s", self, conn.name, error)
        if not link.discovered or link.address in self.nsqd_tcp_addresses:
            self._schedule_reconnect(link.address)
        else:
            # A discovered nsqd is connected again only if lookupd lists it:
            # ask now (as go-nsq does) rather than at the next scheduled poll.
            self.query_lookupd()

    def _retire(self, link: _Link) -> None:
        """Keep a lost link's counts for the cumulative ``stats()["by_nsqd"]``."""
        _add_counts(self._retired.setdefault(link.conn.name, dict.fromkeys(COUNTERS, 0)), link)

    def _schedule_reconnect(self, address: str) -> None:
        if self._closing or self._wheel is None:
            return
        delay = self._reconnect.failed(address)
        log.info("%s: reconnecting to %s in %.2f s", self, address, delay)
        pending = self._reconnect_timers.pop(address, None)
        if pending is not None:
            pending.cancel()  # an earlier retry (connect_to_nsqd tried at once): one chain
        self._reconnect_timers[address] = self._wheel.call_later(
            delay, self._spawn_connect, address, False, owner=self
        )

    def _check_alive(self) -> None:
        now = time.monotonic()
        for link in list(self._links.values()):
            link.conn.check_alive(now)

    def _on_error(self, conn: Connection, error: ServerError) -> None:
        log.warning("%s: %s answered %s", self, conn.name, error)

    # -- discovery ---------------------------------------------------------------

    def _poll(self) -> None:
        """One lookupd poll (in a greenlet of the consumer), then the next is scheduled."""
        if self._poller is None or self._closing:
            return
        cfg = self.config
        delay = cfg.lookupd_poll_interval * (1.0 + self._rng.uniform(0.0, cfg.lookupd_poll_jitter))
        try:
            found = self._poller.poll()
        except NSQError as exc:
            # Every lookupd failed: ask again on the reconnect policy, never
            # later than the regular poll would.
            delay = min(delay, self._reconnect.failed(_LOOKUPD))
            log.warning("%s: lookupd poll failed: %s; polling again in %.2f s", self, exc, delay)
            found = set()
        else:
            self._reconnect.succeeded(_LOOKUPD)
        for address in sorted(found):
            try:
                name = normalize_address(address)
            except ValueError:
                log.warning("%s: lookupd listed a bad address %r", self, address)
                continue
            self._spawn_connect(name, discovered=True)
        if self._wheel is not None and not self._closing:
            if self._poll_timer is not None:
                self._poll_timer.cancel()  # an extra poll (query_lookupd) replaces the next one
            self._poll_timer = self._wheel.call_later(
                delay, self._tasks.spawn, self._poll, owner=self
            )

    def connect_to_nsqd(self, address: str) -> None:
        """Add ``address`` (``"host:port"``) to the static nsqd and connect to it.

        Does not block: the connection is made in the background and, like
        every static address, reconnected with backoff if it fails.
        """
        name = normalize_addresses("address", address)[0]
        if name not in self.nsqd_tcp_addresses:
            self.nsqd_tcp_addresses = (*self.nsqd_tcp_addresses, name)
        if self._started:
            self._spawn_connect(name, discovered=False)

    def query_lookupd(self) -> None:
        """Poll lookupd now, in the background (a poll is also scheduled every interval)."""
        if self._poller is not None and not self._closing:
            self._tasks.spawn(self._poll)

    # -- messages ----------------------------------------------------------------

    def _on_message(self, conn: Connection, wire: WireMessage) -> None:
        """Runs in the connection's reader greenlet: count, top up RDY, queue. Never blocks."""
        name = conn.name
        link = self._links.get(name)
        if link is None or link.conn is not conn:
            timeout = conn.msg_timeout
            message = Message(
                wire.id, wire.body, wire.timestamp, wire.attempts, name, self, timeout, conn
            )
            message.requeue(0.0, backoff=False)  # not counted, so respond() counts nothing
            return
        now = time.monotonic()
        message = delivered(
            wire.id, wire.body, wire.timestamp, wire.attempts,
            name, self, link.msg_timeout, conn, now,
        )  # fmt: skip
        link.received += 1
        commands = self._planner.message_received(name, now)
        if commands:
            self._send_rdy(commands)
        elif bool(self._starved_names) is not self._starved_flag:
            self._update_starved()  # _send_rdy with no commands
        if self._closing:
            message.requeue(0.0, backoff=False)
            return
        link.unanswered.add(message)
        if self._observers:
            self._observe(message)
        if self._batcher is not None:
            self._batcher.add(message)  # hands batches to _enqueue
            return
        queue = self._queue  # _enqueue, inlined on the hot path
        queue.put(message)
        if self._idle_workers < queue.qsize() and len(self._workers.greenlets) < (
            self._concurrency or self._planner.max_in_flight or 1  # concurrency, inlined
        ):
            self._workers.spawn(self._work)

    def _observe(self, message: Message) -> None:
        for observer in self._observers:
            try:
                observer(message)
            except Exception:
                log.exception("%s: message observer %r failed", self, observer)

    def _enqueue(self, item: Message | Batch) -> None:
        """Queue a message or a batch for a worker, spawning one if needed. Never blocks."""
        queue = self._queue
        queue.put(item)
        if self._idle_workers < queue.qsize() and len(self._workers.greenlets) < self.concurrency:
            self._workers.spawn(self._work)

    def _drop_queued(self, conn: Connection) -> None:
        """Remove ``conn``'s messages from the queue (its connection died: nsqd redelivers)."""
        waiting = self._queue.queue  # the Queue's deque; removing items wakes nobody
        # A batch keeps its messages of ``conn``: Batcher.run skips them.
        if any(isinstance(m, Message) and m.connection is conn for m in waiting):
            kept = [m for m in waiting if not isinstance(m, Message) or m.connection is not conn]
            waiting.clear()
            waiting.extend(kept)

    def _requeue_queued(self) -> None:
        while True:
            try:
                message = self._queue.get_nowait()
            except gevent.queue.Empty:
                return
            _requeue_now(message)

    def _work(self) -> None:
        queue = self._queue
        me = gevent.getcurrent()
        while True:
            self._idle_workers += 1
            try:
                message = queue.get()
            finally:
                self._idle_workers -= 1
            if message is None:
                return
            if self._closing:
                _requeue_now(message)
                continue
            self._running[me] = message
            try:
                if isinstance(message, Batch):
                    self._run_batch(message)
                else:
                    self._process(message)
            finally:
                self._running.pop(me, None)
            if self._closing:
                return  # close() requeues what is still queued

    def _run_batch(self, batch: Batch) -> None:
        if self._batcher is not None:
            timing = self._handler_timing
            started = perf_counter() if timing is not None else 0.0
            self._batcher.run(batch)
            if timing is not None:
                timing(perf_counter() - started)

    def _process(self, message: Message) -> None:
        conn = message.connection
        if isinstance(conn, Connection) and conn.closed:
            log.debug("%s: skipping %s: its connection closed; nsqd redelivers it", self, message)
            return
        max_attempts = self.config.max_attempts
        if max_attempts and message.attempts > max_attempts:
            self._give_up(message)
            return
        timing = self._handler_timing
        started = perf_counter() if timing is not None else 0.0
        try:
            if self._plain_handle and self._handler is not None:
                self._handler(message)  # Consumer.handle, inlined on the hot path
            else:
                self.handle(message)
        except RequeueMessage as request:
            message.requeue(request.delay, request.backoff)
        except (Exception, gevent.Timeout) as exc:
            # A gevent.Timeout escaping the handler is the handler's own (it
            # ran out of time): a failure like any other.
            log.exception("%s: handler failed on %s; requeueing it", self, message)
            if self._dead_letters is not None:
                self._dead_letters.handler_failed(message, exc)
            message.requeue(None, backoff=True)
        except BaseException:  # GreenletExit, KeyboardInterrupt: answer, then unwind
            message.requeue(0.0, backoff=False)
            raise
        else:
            if not message._async:  # is_async, inlined on the hot path
                message.finish()
        if timing is not None:
            timing(perf_counter() - started)

    def _give_up(self, message: Message) -> None:
        """Dead-letter (blocks up to ``dead_letter_timeout``), then the hook, then FIN."""
        dead_letters = self._dead_letters
        if dead_letters is not None and not dead_letters.publish(message):
            message.requeue(None, backoff=False)  # dead-lettered on a later delivery
            return
        try:
            self.on_giving_up(message)
        except (Exception, gevent.Timeout):
            if dead_letters is not None:  # it is safe in the dead-letter topic
                log.exception("%s: on_giving_up failed on dead-lettered %s", self, message)
                self._given_up(message)
                return
            log.exception("%s: on_giving_up failed on %s; requeueing it", self, message)
            message.requeue(None, backoff=False)
            return
        except BaseException:
            message.requeue(0.0, backoff=False)
            raise
        self._given_up(message)

    def _given_up(self, message: Message) -> None:
        """Count ``message`` as given up (``stats()["by_nsqd"]``), then FIN it."""
        kept = self._retired.setdefault(message.nsqd, dict.fromkeys(COUNTERS, 0))
        kept["given_up"] += 1
        message.finish()

    def requeue_delay(self, attempts: int) -> float:
        """The REQ delay for a failure without an explicit delay, in seconds."""
        cfg = self.config
        return min(cfg.requeue_delay * max(1, attempts), cfg.max_requeue_delay)

    # -- answers: one path each for FIN, REQ and TOUCH (the Message's Responder) --

    def on_finish(self, message: Message) -> None:
        """FIN ``message`` and count a success; called by :meth:`Message.finish`. Does not block."""
        # _answering, _quietly and _message_done, inlined on the hot path.
        conn = message.connection
        if type(conn) is not Connection:
            conn = _connection_of(message)
        name = conn.name
        link = self._links.get(name)
        if link is not None and link.conn is conn:
            link.unanswered.discard(message)
        else:
            link = None
        try:
            conn.finish(message.wire_id)
        except NSQConnectionError as exc:
            log.debug("%s: not sent (%s); nsqd redelivers what is unanswered", self, exc)
        if link is None:
            return
        link.finished += 1
        now = time.monotonic()
        commands = self._planner.message_done(name, now)
        if commands or bool(self._starved_names) is not self._starved_flag:
            self._send_rdy(commands)
        if self._closing:
            if self._in_flight() == 0:
                self._drained.set()
            return
        backoff = self._backoff
        if backoff is not None and backoff.level:  # at level 0 a success changes nothing
            action = backoff.success(now)
            if action is not None:
                self._apply_backoff(action)

    def on_requeue(self, message: Message, delay: float | None, backoff: bool) -> None:
        """REQ ``message`` after ``delay`` seconds (``None``: :meth:`requeue_delay`).

        With ``backoff``, the failure counts toward the consumer's backoff
        first. Called by :meth:`Message.requeue`. Does not block.
        """
        conn, link = self._answering(message)
        if backoff and link is not None and self._backoff is not None and not self._closing:
            # RDY 0 goes out before the REQ, so nsqd cannot hand the
            # failed message straight back inside the backoff window.
            self._apply_backoff(self._backoff.failure(time.monotonic()))
        delay = self.requeue_delay(message.attempts) if delay is None else delay
        self._quietly(conn.requeue, message.wire_id, delay)
        if link is not None:
            link.requeued += 1
            self._message_done(conn)

    def on_touch(self, message: Message) -> None:
        """TOUCH ``message``; called by :meth:`Message.touch`. Does not block."""
        self._quietly(_connection_of(message).touch, message.wire_id)

    def respond(self, message: Message, action: str, delay: float | None, backoff: bool) -> None:
        """``action`` ``"finish"``, ``"requeue"`` or ``"touch"``: the matching ``on_*`` method.

        Kept for callers of the older single-method responder interface.
        """
        if action == "finish":
            self.on_finish(message)
        elif action == "requeue":
            self.on_requeue(message, delay, backoff)
        elif action == "touch":
            self.on_touch(message)
        else:
            raise ValueError(f"action={action!r}: use 'finish', 'requeue' or 'touch'")

    def _answering(self, message: Message) -> tuple[Connection, _Link | None]:
        """A FIN or REQ is about to go out: the message is no longer unanswered.

        Returns its connection and, while that is still subscribed, its link.
        """
        conn = message.connection
        if type(conn) is not Connection:
            conn = _connection_of(message)
        link = self._links.get(conn.name)
        if link is None or link.conn is not conn:
            return conn, None
        link.unanswered.discard(message)
        return conn, link

    def _message_done(self, conn: Connection, now: float | None = None) -> bool:
        """The planner's count drops (RDY may top up); ``False`` once closing."""
        commands = self._planner.message_done(conn.name, time.monotonic() if now is None else now)
        if commands or bool(self._starved_names) is not self._starved_flag:
            self._send_rdy(commands)
        if self._closing:
            if self._in_flight() == 0:
                self._drained.set()
            return False
        return True

    def _quietly(self, send: Callable[..., None], *args: Any) -> None:
        try:
            send(*args)
        except NSQConnectionError as exc:
            log.debug("%s: not sent (%s); nsqd redelivers what is unanswered", self, exc)

    # -- introspection -----------------------------------------------------------

    @property
    def connections(self) -> list[Connection]:
        """The subscribed connections."""
        return [link.conn for link in self._links.values()]

    def stats(self) -> dict[str, Any]:
        """Per-connection and total counters, backoff state and starvation.

        Per connection: ``rdy`` is the RDY count last sent (``last_rdy``, the
        same, is kept for older callers), ``rdy_remaining`` how many more
        messages that RDY allows (never below 0: nsqd may send a few sent
        before a lowered RDY arrived), ``in_flight`` received and not yet
        answered; ``received``/``finished``/``requeued`` count since the
        connection subscribed. ``queued`` counts messages waiting for a
        handler. ``dead_letters`` is ``None`` without a ``dead_letter_topic``,
        else its ``topic``, ``envelope`` and the counts ``published`` and
        ``failed`` (publishes that failed: those messages were requeued).

        ``by_nsqd`` maps each nsqd ever subscribed to its counts of
        :data:`COUNTERS` (``received``, ``finished``, ``requeued``,
        ``given_up``: dead-lettered and/or handed to ``on_giving_up``, and
        finished), cumulative since the consumer started: they never go down
        when a connection is lost (what Prometheus counters need).
        ``given_up`` in ``totals`` is their sum.

        ``last_message_time`` is wall-clock seconds (``time.time()``), or ``None``.
        ``rdy_target`` is the count the RDY policy wants for a connection (its
        ``last_rdy`` may be lower while others answer what they hold) and
        ``rdy_reason`` why: a key of :data:`gnsqlite.flow.rdy.REASONS`
        (``"even"``, ``"demand"``, ``"idle"``, ``"rotation"``, ``"waiting"``,
        ``"backoff"``, ``"probe"`` ...).
        """
        now = time.monotonic()
        wall_offset = time.time() - now  # the planner's monotonic times as wall-clock
        conns = []
        for name, link in self._links.items():
            flow = self._planner.conns.get(name)
            last = flow.last_message_at if flow else None
            conns.append(
                {
                    "address": name,
                    "rdy": flow.last_rdy if flow else 0,
                    "rdy_remaining": max(0, flow.rdy) if flow else 0,
                    "last_rdy": flow.last_rdy if flow else 0,
                    "rdy_target": flow.target if flow else 0,
                    "rdy_reason": flow.reason if flow else "closed",
                    "in_flight": flow.in_flight if flow else 0,
                    "received": link.received,
                    "finished": link.finished,
                    "requeued": link.requeued,
                    "last_message_time": None if last is None else last + wall_offset,
                }
            )
        totals = {
            key: sum(c[key] for c in conns)  # type: ignore[misc]
            for key in (
                "rdy", "rdy_remaining", "last_rdy", "in_flight", "received", "finished", "requeued"
            )
        }
        by_nsqd = {name: dict(counts) for name, counts in self._retired.items()}
        for link in self._links.values():
            _add_counts(by_nsqd.setdefault(link.conn.name, dict.fromkeys(COUNTERS, 0)), link)
        totals["given_up"] = sum(c["given_up"] for c in by_nsqd.values())
        return {
            "topic": self.topic,
            "channel": self.channel,
            "max_in_flight": self._planner.max_in_flight,
            "connections": conns,
            "totals": totals,
            "by_nsqd": by_nsqd,
            "backoff": self._backoff.describe(now) if self._backoff else {"state": "off"},
            "starved": self.is_starved(),
            "handlers_running": len(self._running),
            "queued": self._queue.qsize(),
            "dead_letters": None if self._dead_letters is None else self._dead_letters.stats(),
            **({"batches": self._batcher.stats()} if self._batcher is not None else {}),
        }

    def health(self) -> Health:
        """Whether the consumer can consume now, for a readiness probe; does not block.

        ``ok`` when started, not closed and subscribed on at least one nsqd.
        Per nsqd it knows (static addresses, and the subscribed ones): whether
        it is subscribed, the seconds since its last message and since
        anything was read from it (heartbeats included; nsqd sends one every
        ``heartbeat_interval``, so an age well above that means a stalled
        connection). Backoff state and level are reported, not counted
        against ``ok``. Sends nothing.
        """
        now = time.monotonic()
        rows: dict[str, ConnectionHealth] = {
            address: ConnectionHealth(address, False, None, None)
            for address in (*self.nsqd_tcp_addresses, *self._connecting)
        }
        for name, link in self._links.items():
            flow = self._planner.conns.get(name)
            last = flow.last_message_at if flow else None
            rows[name] = ConnectionHealth(
                name,
                not link.conn.closed,
                None if last is None else now - last,
                now - link.conn.last_received,
            )
        backoff = self._backoff
        return build_health(
            started=self._started,
            closed=self._closing,
            connections=rows.values(),
            backoff=backoff.state if backoff is not None else "off",
            backoff_level=backoff.level if backoff is not None else 0,
        )


def _add_counts(counts: dict[str, int], link: _Link) -> None:
    """Add ``link``'s received/finished/requeued counts to ``counts``."""
    counts["received"] += link.received
    counts["finished"] += link.finished
    counts["requeued"] += link.requeued


def _requeue_now(item: Message | Batch | None) -> None:
    """Requeue a message, or every message of a batch, at once and without backoff.

    Those already answered are left alone (``requeue`` returns ``False``).
    """
    for message in messages_of(item) if item is not None else ():
        message.requeue(0.0, backoff=False)


def _connection_of(message: Message) -> Connection:
    conn = message.connection
    if not isinstance(conn, Connection):
        raise TypeError(f"{message!r} did not come from a gnsqlite Connection")
    return conn
