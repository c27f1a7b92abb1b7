"""The Consumer: subscribe to a topic/channel on many nsqd and handle its messages.

::

    def handle(message):
        print(message.body)          # returning finishes; raising requeues

    consumer = Consumer("clicks", "archive", handle,
                        lookupd_http_addresses=["127.0.0.1:4161"], max_in_flight=50)
    consumer.start()
    ...
    consumer.close()                 # drains: RDY 0, CLS, running handlers finish

How the work is split (``docs/architecture.md`` draws it): :class:`Consumer`
is a façade over collaborators it builds in its constructor, one module each:

* :mod:`~gnsqlite.consumer.lifecycle`: the
  :class:`~gnsqlite.consumer.lifecycle.Lifecycle` (started, closing,
  drained, closed) its collaborators share;
* :mod:`~gnsqlite.consumer.link`: a :class:`~gnsqlite.consumer.link.Link` per
  subscribed connection, the connection's ``on_message`` target and the
  messages' responder (FIN goes straight to it);
* :mod:`~gnsqlite.consumer.links`: the :class:`~gnsqlite.consumer.links.LinkSet`
  (connect, subscribe, loss, reconnects, lookupd polls, cumulative counts);
* :mod:`~gnsqlite.consumer.flow_control`: RDY and backoff executed (the
  pure :class:`~gnsqlite.flow.RdyPlanner` and :class:`~gnsqlite.flow.Backoff`
  decide), the ``starved`` Event;
* :mod:`~gnsqlite.consumer.dispatch`: the queue and at most ``concurrency``
  reused worker greenlets; readers never run handler code;
* :mod:`~gnsqlite.consumer.settle`: handler result -> answer, giving up,
  ``max_age``;
* :mod:`~gnsqlite.consumer.lease`: the :class:`~gnsqlite.consumer.lease.Leases`,
  TOUCH for the messages handlers hold, up to ``max_lease``;
* :mod:`~gnsqlite.consumer.views`: ``stats()`` and ``health()``;
* :mod:`gnsqlite.consumer.batch`: the batcher, for ``batch_handler``.

RDY redistribution, backoff windows, lookupd polls and reconnects are timers
on the hub's :class:`~gnsqlite.timers.TimerWheel` owned by the consumer and
cancelled by :meth:`Consumer.close`; a connection's liveness is its own.

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
from typing import Any, cast

from ..config import ConnectionConfig, ConsumerConfig, split_options
from ..connection import Connection
from ..deadletter import DeadLetterPublisher
from ..errors import ConfigError, NSQConnectionError, ServerError
from ..flow import make_backoff_strategy
from ..health import Health
from ..message import Message
from ..net import normalize_addresses
from ..protocol import check_channel_name, check_topic_name
from ..timers import TimerWheel
from .batch import BatchConfig, Batcher, BatchHandler
from .dispatch import Dispatcher
from .flow_control import FlowControl
from .lease import Leases
from .lifecycle import Lifecycle
from .link import LinkRoutes
from .links import COUNTERS, ConnectionHooks, LinkSet, Subscription
from .settle import GiveUpHook, Settler, log_giving_up
from .views import health_of, stats_of

__all__ = ["COUNTERS", "Consumer", "GiveUpHook", "Handler", "HandlerWrapper", "log_giving_up"]

log = logging.getLogger(__name__)

Handler = Callable[[Message], Any]
#: ``wrapper(handler)`` -> what runs instead of ``handler`` (see :meth:`Consumer.wrap_handler`).
HandlerWrapper = Callable[[Callable[[Any], Any]], Callable[[Any], Any]]


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
    rotates: how long an idle one keeps it, and the longest any keeps it while
    no waiting one is known to have messages),
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
    consumer is starved; see :mod:`gnsqlite.consumer.batch`.

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
        static = normalize_addresses("nsqd_tcp_addresses", nsqd_tcp_addresses)
        lookupd = normalize_addresses("lookupd_http_addresses", lookupd_http_addresses)
        self.lookupd_http_addresses = lookupd
        if not static and not lookupd:
            raise ConfigError(
                "give at least one address: nsqd_tcp_addresses=['host:4150'] or"
                " lookupd_http_addresses=['host:4161']"
            )
        consumer_opts, conn_opts = split_options(
            options, (ConsumerConfig, ConnectionConfig), "Consumer"
        )
        if connection_config is not None and conn_opts:
            raise ConfigError("pass connection options as connection_config= or keywords, not both")
        self.config = config = ConsumerConfig(**consumer_opts)
        self.connection_config = (
            connection_config if connection_config is not None else ConnectionConfig(**conn_opts)
        )
        batch = BatchConfig.for_consumer(
            handler, batch_handler, batch_size, batch_timeout, config.max_in_flight
        )
        self._handler = handler
        #: What :meth:`wrap_handler` added, innermost first.
        self.handler_wrappers: tuple[HandlerWrapper, ...] = ()
        rng = random.Random()
        self._dead_letters = DeadLetterPublisher.for_consumer(
            self.topic, self.channel, config, self.connection_config
        )
        # The collaborators, bottom up (none of them knows this class).
        self._life = life = Lifecycle(owner=self)
        self._flow = FlowControl(config, make_backoff_strategy(backoff), rng, life)
        self._leases = Leases(config.max_lease, self._count_touch)
        self._settler = Settler(
            config,
            on_giving_up,
            self._dead_letters,
            self._count_given_up,
            name=self,
            count_expired=self._count_expired,
            leases=self._leases,
        )
        self._dispatcher = Dispatcher(self._settler, self._flow, life, config.concurrency)
        self._leases.running = self._dispatcher.running  # single messages leased while run
        self._batcher = (
            Batcher(
                batch_handler,
                batch,
                dispatch=self._dispatcher.enqueue,
                is_starved=self._flow.is_starved,
                settle=self._settler.settle_batch,
                leases=self._leases,
            )
            if batch is not None and batch_handler is not None
            else None
        )
        self._dispatcher.batcher = self._batcher
        if self._batcher is not None:
            self._flow.on_starved = self._batcher.starved
        self._observers: list[Callable[[Message], object]] = []
        flow = self._flow
        routes = LinkRoutes(
            flow,
            self._batcher if self._batcher is not None else self._dispatcher,
            self._settler.requeue_delay,
            self._observers,
            life,
        )
        self._links = LinkSet(
            Subscription(self.topic, self.channel, static, lookupd, config, self.connection_config),
            flow,
            self._dispatcher,
            routes,
            ConnectionHooks(self._heartbeat, self._lost, self._server_error),
            life,
            rng,
        )
        self._set_dispatch_handler()
        #: Set while :meth:`is_starved` is true: a batching handler waits on it.
        self.starved = self._flow.starved
        #: Set while at least one connection is subscribed (:attr:`connections`).
        self.connected = self._links.connected

    def __repr__(self) -> str:
        return f"<Consumer {self.topic}/{self.channel} conns={len(self._links.links)}>"

    def __enter__(self) -> Consumer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the handler and the hooks -------------------------------------------------

    def handle(self, message: Message) -> Any:
        """Handle one message; the default calls the ``handler`` given to the constructor."""
        if self._handler is None:
            raise ConfigError("no handler: pass handler= or override Consumer.handle")
        return self._handler(message)

    def _set_dispatch_handler(self) -> None:
        # Consumer.handle not overridden: the worker calls the handler directly.
        plain = type(self).handle is Consumer.handle
        handler = self._handler if plain else self.handle
        if handler is not None:
            for wrap in self.handler_wrappers:
                handler = wrap(handler)
        self._dispatcher.handler = handler

    def wrap_handler(self, wrapper: HandlerWrapper) -> None:
        """Run every handler call through ``wrapper`` from the next message on.

        ``wrapper(handler)`` returns what the worker calls instead of
        ``handler``: with one :class:`~gnsqlite.message.Message` for a
        ``handler`` (or :meth:`handle`), with the list of messages for a
        ``batch_handler``. It runs in the worker greenlet, must call
        ``handler`` and let its exceptions through (they decide the answer).
        A later :meth:`set_handler` is wrapped too; a wrapper added later
        runs outside those added before. :mod:`gnsqlite.tracing` uses it.
        Does not block.
        """
        self.handler_wrappers += (wrapper,)
        self._set_dispatch_handler()
        if self._batcher is not None:
            self._batcher.handler = wrapper(self._batcher.handler)

    def set_handler(self, handler: Handler) -> None:
        """Replace the handler (takes effect for the next message)."""
        self._handler = handler
        self._set_dispatch_handler()

    @property
    def on_giving_up(self) -> GiveUpHook:
        """Called with each message past ``max_attempts`` (after its dead letter, before FIN)."""
        return self._settler.on_giving_up

    @on_giving_up.setter
    def on_giving_up(self, hook: GiveUpHook) -> None:
        self._settler.on_giving_up = hook

    def on_heartbeat(self, conn: Connection) -> None:
        """Called after each heartbeat nsqd sends on ``conn`` (about every
        ``heartbeat_interval`` seconds); override to observe liveness.

        Runs in the connection's reader greenlet: it must not block (spawn a
        greenlet for anything slow). The default does nothing.
        """

    def on_connection_lost(self, conn: Connection, error: Exception | None) -> None:
        """Called when a connection of the consumer ends, before it is reconnected.

        ``error`` is what ended it, ``None`` after a close. Runs in the
        greenlet that noticed (usually the reader): it must not block.
        Override or assign to observe losses (the fault tests count them).
        The default does nothing.
        """

    def on_server_error(self, conn: Connection, error: ServerError) -> None:
        """Called with nsqd's non-fatal errors on ``conn`` (``E_FIN_FAILED``,
        ``E_REQ_FAILED``, ``E_TOUCH_FAILED``). Must not block; override or
        assign to collect them. The default logs a WARNING."""
        log.warning("%s: %s answered %s", self, conn.name, error)

    # Hooks are looked up at each call, so an override or an assignment counts.
    def _heartbeat(self, conn: Connection) -> None:
        self.on_heartbeat(conn)

    def _lost(self, conn: Connection, error: Exception | None) -> None:
        self.on_connection_lost(conn, error)

    def _server_error(self, conn: Connection, error: ServerError) -> None:
        self.on_server_error(conn, error)

    def _count_given_up(self, nsqd: str) -> None:
        self._links.count(nsqd, "given_up")

    def _count_expired(self, nsqd: str) -> None:
        self._links.count(nsqd, "expired")

    def _count_touch(self, nsqd: str) -> None:
        self._links.count(nsqd, "touches")

    def add_message_observer(self, observer: Callable[[Message], object]) -> None:
        """Call ``observer(message)`` for every message received (a dashboard's tail).

        It runs where the connection reads (the hub itself on a plain TCP
        connection, else its reader greenlet), before the handler: it must
        not block and must not answer the message. Its exceptions are
        logged and ignored.
        """
        self._observers.append(observer)

    def remove_message_observer(self, observer: Callable[[Message], object]) -> None:
        """Stop calling ``observer``; a no-op if it was not added."""
        if observer in self._observers:
            self._observers.remove(observer)

    def set_handler_timing(self, timing: Callable[[float], None] | None) -> None:
        """Call ``timing(seconds)`` after each handler call (``None``: stop).

        ``seconds`` is how long the handler ran (a handler that raised
        included; an async message's later answer is not); with a
        ``batch_handler``, how long each batch call ran. It runs in the
        worker greenlet: it must not block; its exceptions are logged and
        ignored. :mod:`gnsqlite.metrics` uses it for its histogram; without
        it the consumer reads no clock for this.
        """
        self._settler.timing = timing

    # -- lifecycle -------------------------------------------------------------

    @property
    def nsqd_tcp_addresses(self) -> tuple[str, ...]:
        """The static nsqd addresses (``"host:port"``)."""
        return self._links.static

    @property
    def concurrency(self) -> int:
        """How many handler greenlets may run at once."""
        return self._dispatcher.concurrency

    def start(self) -> None:
        """Start connecting and consuming. Does not block; safe to call twice."""
        if self._life.closing:
            raise NSQConnectionError(f"{self.topic}/{self.channel}", "the consumer is closed")
        if self._life.started:
            return
        if self._handler is None and self._batcher is None and type(self).handle is Consumer.handle:
            raise ConfigError("no handler: pass handler= or override Consumer.handle")
        self._life.start()
        wheel = TimerWheel.for_hub()
        self._leases.start(wheel)
        if self._batcher is not None:
            self._batcher.start(wheel)
        self._flow.start(wheel)
        self._links.start(wheel)

    def close(self, timeout: float = 30.0) -> None:
        """Drain and stop; blocks up to about ``timeout`` seconds. Safe to call twice.

        Sends ``RDY 0`` and ``CLS`` to every nsqd, requeues messages received
        but not started, lets running handlers (and async messages) finish
        and answer until the timeout, requeues what is still unanswered,
        then closes the connections. Afterwards no greenlet or timer of the
        consumer remains. Called from a handler, it does not wait for that
        handler, whose message is requeued (its worker ends when it returns).
        """
        life, batcher, dispatcher = self._life, self._batcher, self._dispatcher
        if not life.begin_close():
            life.wait_closed(timeout)
            return
        deadline = time.monotonic() + timeout
        if life.started:
            TimerWheel.for_hub().cancel_owner(self)
        # Each collaborator closes its part, in this order:
        self._flow.pause()  # RDY 0 through the planner: nothing tops it up again
        self._links.start_close()  # no more connecting or polling; CLS
        if batcher is not None:
            batcher.close()  # the batch being collected is requeued
        dispatcher.start_close()  # the queue (and a calling handler's message) requeued
        dispatcher.drain(deadline - time.monotonic())
        self._flow.wait_drained(deadline - time.monotonic())
        dispatcher.kill()
        if self._dead_letters is not None:
            self._dead_letters.close()
        self._links.requeue_unanswered()  # async ones, and those of killed handlers
        dispatcher.stop()
        self._links.close(max(0.1, deadline - time.monotonic()))
        if batcher is not None:
            batcher.stop()
        self._leases.stop()
        self._flow.stop()
        life.finish_close()

    def join(self, timeout: float | None = None) -> bool:
        """Block until the consumer has been closed; ``True`` if it has within ``timeout`` s."""
        return self._life.wait_closed(timeout)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` finished."""
        return self._life.closed

    # -- flow --------------------------------------------------------------------

    @property
    def max_in_flight(self) -> int:
        """The RDY budget over all connections."""
        return self._flow.planner.max_in_flight

    def set_max_in_flight(self, max_in_flight: int) -> None:
        """Change the RDY budget at run time; 0 pauses the flow. Does not block."""
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int):
            raise ConfigError(f"max_in_flight={max_in_flight!r} must be an int")
        if max_in_flight < 0:
            raise ConfigError(f"max_in_flight={max_in_flight!r} is out of range: use 0 or more")
        # In backoff the planner keeps its mode (RDY 0, or the one probe) and
        # applies the new budget when the flow resumes.
        self._flow.set_max_in_flight(max_in_flight)

    def is_starved(self) -> bool:
        """True when a connection's in-flight count reached 85% of its last RDY.

        A batching handler processes its batch then (see ``starved``).
        """
        return self._flow.is_starved()

    def wait_starved(self, timeout: float | None = None) -> bool:
        """Block until the consumer is starved; ``True`` if it is within ``timeout`` s."""
        return bool(self.starved.wait(timeout))

    def requeue_delay(self, attempts: int) -> float:
        """The REQ delay for a failure without an explicit delay, in seconds."""
        return self._settler.requeue_delay(attempts)

    # -- connections -------------------------------------------------------------

    def connect_to_nsqd(self, address: str) -> None:
        """Add ``address`` (``"host:port"``) to the static nsqd and connect to it.

        Does not block: the connection is made in the background and, like
        every static address, reconnected with backoff if it fails.
        """
        self._links.add_static(normalize_addresses("address", address)[0])

    def query_lookupd(self) -> None:
        """Poll lookupd now, in the background (a poll is also scheduled every interval)."""
        self._links.query_lookupd()

    @property
    def connections(self) -> list[Connection]:
        """The subscribed connections."""
        # the link set attaches Connections; a link asks only for LinkConnection's part
        return [cast(Connection, link.conn) for link in self._links.links.values()]

    # -- introspection -----------------------------------------------------------

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
        finished; ``expired``: older than ``max_age``, dead-lettered or
        finished without the handler; ``touches``: TOUCH sent to extend a
        held message's lease), cumulative since the consumer started: they
        never go down when a connection is lost (what Prometheus counters
        need). ``given_up``, ``expired`` and ``touches`` in ``totals`` are
        their sums. ``leases`` is ``max_lease`` (``None``: off), the
        messages ``held`` now and ``touches`` sent.

        ``last_message_time`` is wall-clock seconds (``time.time()``), or ``None``.
        ``rdy_target`` is the count the RDY policy wants for a connection (its
        ``last_rdy`` may be lower while others answer what they hold) and
        ``rdy_reason`` why: a key of :data:`gnsqlite.flow.rdy.REASONS`
        (``"even"``, ``"demand"``, ``"idle"``, ``"rotation"``, ``"waiting"``,
        ``"backoff"``, ``"probe"`` ...). Does not block.
        """
        return stats_of(
            self.topic,
            self.channel,
            self._links,
            self._flow,
            self._dispatcher,
            self._dead_letters,
            self._leases,
        )

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
        return health_of(self._links, self._flow, self._life.started, self._life.closing)
