"""The link set: which nsqd the consumer reads, and keeping it so.

:class:`LinkSet` connects and subscribes (each in a greenlet of its own
group), keeps the :class:`~gnsqlite.consumer.link.Link` of every subscribed
connection by name, handles a lost connection (flow control forgets it, its
queued messages are dropped, it is reconnected), keeps one reconnect timer
per address, tells static nsqd (reconnected with backoff) from discovered
ones (connected again only if lookupd lists them), polls lookupd (a
:class:`~gnsqlite.discovery.Discovery`, the Producer's loop too), and keeps
the counts of connections that left, so that ``stats()["by_nsqd"]`` is
cumulative. The constructor opens no socket and starts nothing.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import gevent.event
import gevent.pool

from ..config import ConnectionConfig, ConsumerConfig
from ..connection import Connection
from ..discovery import Discovery, LookupdPoller
from ..errors import NSQConnectionError, NSQError, ServerError, WrongPortError
from ..flow import Reconnect
from ..message import Message
from ..timers import Timer, TimerWheel
from .dispatch import Dispatcher
from .flow_control import FlowControl
from .lifecycle import Lifecycle
from .link import Link, LinkRoutes

__all__ = ["COUNTERS", "ConnectionHooks", "LinkSet", "Subscription"]

log = logging.getLogger(__name__)

#: The counters ``stats()["by_nsqd"]`` keeps per nsqd, cumulative across reconnects.
COUNTERS = ("received", "finished", "requeued", "given_up", "expired", "touches")


@dataclass(frozen=True)
class Subscription:
    """What a consumer reads and how: ``topic``/``channel``, the static nsqd
    (``"host:port"``) and lookupd (HTTP ``"host:port"``) addresses, its
    options and its connections' options."""

    topic: str
    channel: str
    static: tuple[str, ...]
    lookupd: tuple[str, ...]
    config: ConsumerConfig
    connection_config: ConnectionConfig


class ConnectionHooks(NamedTuple):
    """The consumer's hooks for its connections' events (each must not block)."""

    on_heartbeat: Callable[[Connection], None]
    on_lost: Callable[[Connection, Exception | None], None]
    on_server_error: Callable[[Connection, ServerError], None]


class LinkSet:
    """The consumer's connections; see the module docstring.

    ``links`` (name -> :class:`Link`, empty at first) is written here alone.
    Each new link sends its events along ``routes``; ``hooks`` are the
    consumer's. ``static`` is the tuple of static nsqd addresses (it may
    grow, :meth:`add_static`). The ``lifecycle``'s owner owns the reconnect
    and poll timers; ``rng`` jitters the reconnect delays and polls.
    """

    def __init__(
        self,
        subscription: Subscription,
        flow: FlowControl,
        dispatcher: Dispatcher,
        routes: LinkRoutes,
        hooks: ConnectionHooks,
        lifecycle: Lifecycle,
        rng: random.Random,
    ) -> None:
        self.topic = subscription.topic
        self.channel = subscription.channel
        self.static = subscription.static
        self.lookupd = subscription.lookupd
        self._config = config = subscription.config
        self._connection_config = subscription.connection_config
        self._flow = flow
        self._dispatcher = dispatcher
        self._routes = routes
        self._hooks = hooks
        self._life = lifecycle
        self._owner = lifecycle.owner
        self._rng = rng
        self.links: dict[str, Link] = {}
        self.connecting: set[str] = set()
        self._reconnect = Reconnect(config.reconnect_interval, config.max_reconnect_interval, rng)
        self._reconnect_timers: dict[str, Timer] = {}  # one pending retry per address
        self._discovery: Discovery | None = None
        self._tasks = gevent.pool.Group()
        self._wheel: TimerWheel | None = None
        #: Set while at least one connection is subscribed.
        self.connected = gevent.event.Event()
        # Counts of connections that went away, and messages given up, per nsqd:
        # with the live links' counts they make the cumulative stats()["by_nsqd"].
        self.retired: dict[str, dict[str, int]] = {}

    def __repr__(self) -> str:
        return repr(self._owner)

    # -- starting and stopping ---------------------------------------------------

    def start(self, wheel: TimerWheel) -> None:
        """Connect to every static nsqd and start polling lookupd. Does not block."""
        self._wheel = wheel
        for address in self.static:
            self.spawn_connect(address, discovered=False)
        if self.lookupd:
            cfg = self._config
            poller = LookupdPoller(self.topic, self.lookupd, cfg.lookupd_request_timeout)
            self._discovery = Discovery(
                poller,
                cfg.lookupd_poll_interval,
                cfg.lookupd_poll_jitter,
                self._reconnect,
                self._rng,
                self._found,
                self._owner,
                self,
            )
            self._discovery.start(wheel)

    def start_close(self) -> None:
        """Closing: stop connecting and polling, send ``CLS`` on every connection.

        Blocks until the connect and poll greenlets ended; nsqd stops sending
        and answers remain allowed.
        """
        if self._discovery is not None:
            self._discovery.close()
        self._tasks.kill(block=True)
        for link in list(self.links.values()):
            link.start_close()

    def requeue_unanswered(self) -> None:
        """REQ every message still unanswered (async ones too), at once. Never blocks.

        Rather than leave them to time out in nsqd, which keeps them in
        flight after the consumer left.
        """
        for link in list(self.links.values()):
            for message in list(link.unanswered):
                message.requeue(0.0, backoff=False)  # False, and nothing sent, if answered

    def close(self, timeout: float) -> None:
        """Close every connection and keep their counts; blocks up to ``timeout`` s."""
        links = list(self.links.values())
        for link in links:
            link.conn.close(timeout)
        for link in links:
            self._retire(link)
            link.leave()
        self.links.clear()
        self.connected.clear()

    # -- connecting ----------------------------------------------------------------

    def spawn_connect(self, address: str, discovered: bool) -> None:
        """Connect and subscribe to ``address`` in the background, unless under way."""
        if self._life.closing or address in self.connecting or address in self.links:
            return
        self.connecting.add(address)
        self._flow.set_connecting(len(self.connecting), rebalance=False)
        self._tasks.spawn(self._connect, address, discovered)

    def add_static(self, address: str) -> None:
        """Make ``address`` a static nsqd and connect to it when started."""
        if address not in self.static:
            self.static = (*self.static, address)
        if self._wheel is not None:
            self.spawn_connect(address, discovered=False)

    def _connect(self, address: str, discovered: bool) -> None:
        link = Link(address, discovered, self._routes)
        conn = Connection(
            address,
            self._connection_config,
            on_message=link.on_message,
            on_error=self._hooks.on_server_error,
            on_close=self._on_close,
            on_heartbeat=self._hooks.on_heartbeat,
            message_class=Message,  # the frame decoder builds the consumer's messages
        )
        link.attach(conn)
        try:
            conn.connect()
            conn.subscribe(
                self.topic, self.channel, timeout=self._connection_config.connect_timeout
            )
        except (NSQError, OSError, ValueError) as exc:
            self.connecting.discard(address)
            self._flow.set_connecting(len(self.connecting), rebalance=True)
            conn.close(0)
            if isinstance(exc, WrongPortError):  # another protocol's port: no retry heals it
                log.error("%s: cannot subscribe on %s: %s; not retried", self, address, exc)
                return
            log.warning("%s: cannot subscribe on %s: %s", self, address, exc)
            if not discovered:
                self._schedule_reconnect(address)
            return
        except BaseException:  # GreenletExit from close(): leave no connection behind
            self.connecting.discard(address)
            conn.close(0)
            raise
        self.connecting.discard(address)
        # No rebalance here: add() below shares the budget out with this one counted.
        self._flow.set_connecting(len(self.connecting), rebalance=False)
        if self._life.closing:
            conn.close()
            return
        self._reconnect.succeeded(address)
        self.links[conn.name] = link
        link.subscribed()
        if conn.closed:
            # It ended after SUB's OK but before this greenlet resumed: its
            # on_close found no link, so handle the loss now.
            self._on_close(conn, conn.error or NSQConnectionError(conn.name, "lost on subscribe"))
            return
        log.info("%s: subscribed on %s", self, conn.name)
        self.connected.set()
        self._flow.add(link, conn.max_rdy_count)

    # -- losing ----------------------------------------------------------------------

    def _on_close(self, conn: Connection, error: Exception | None) -> None:
        self._hooks.on_lost(conn, error)
        link = self.links.get(conn.name)
        if link is None or link.conn is not conn:
            return
        del self.links[conn.name]
        self._retire(link)
        link.leave()
        if not self.links:
            self.connected.clear()
        # Its unanswered messages, gone with the link, can no longer be
        # answered: nsqd redelivers them. Those no handler has started
        # leave the queue now, so they are never handled twice.
        self._flow.remove(conn.name)
        self._dispatcher.drop(conn)
        if self._life.closing or error is None:
            return
        log.warning("%s: lost %s: %s", self, conn.name, error)
        if not link.discovered or link.address in self.static:
            self._schedule_reconnect(link.address)
        else:
            # A discovered nsqd is connected again only if lookupd lists it:
            # ask now (as go-nsq does) rather than at the next scheduled poll.
            self.query_lookupd()

    def _retire(self, link: Link) -> None:
        """Keep a leaving link's counts for the cumulative ``stats()["by_nsqd"]``."""
        kept = self.retired.setdefault(link.name, dict.fromkeys(COUNTERS, 0))
        for key, value in link.counts().items():
            kept[key] += value

    def count(self, nsqd: str, key: str) -> None:
        """Add one to ``nsqd``'s counter ``key`` of :data:`COUNTERS` kept outside the
        links: ``given_up`` (dead-lettered and/or hooked, then finished),
        ``expired`` (past ``max_age``, then dead-lettered or finished),
        ``touches`` (TOUCH sent to extend a lease)."""
        self.retired.setdefault(nsqd, dict.fromkeys(COUNTERS, 0))[key] += 1

    def by_nsqd(self) -> dict[str, dict[str, int]]:
        """The cumulative counts of :data:`COUNTERS` per nsqd ever subscribed."""
        counts = {name: dict(kept) for name, kept in self.retired.items()}
        for link in self.links.values():
            row = counts.setdefault(link.name, dict.fromkeys(COUNTERS, 0))
            for key, value in link.counts().items():
                row[key] += value
        return counts

    def _schedule_reconnect(self, address: str) -> None:
        if self._life.closing or self._wheel is None:
            return
        delay = self._reconnect.failed(address)
        log.info("%s: reconnecting to %s in %.2f s", self, address, delay)
        pending = self._reconnect_timers.pop(address, None)
        if pending is not None:
            pending.cancel()  # an earlier retry (connect_to_nsqd tried at once): one chain
        self._reconnect_timers[address] = self._wheel.call_later(
            delay, self.spawn_connect, address, False, owner=self._owner
        )

    # -- discovery -------------------------------------------------------------------

    def query_lookupd(self) -> None:
        """Poll lookupd now, in the background."""
        if self._discovery is not None and not self._life.closing:
            self._discovery.query()

    def _found(self, addresses: set[str]) -> None:
        """A lookupd poll's answer (the discovery greenlet): connect to each nsqd listed."""
        for address in sorted(addresses):
            self.spawn_connect(address, discovered=True)
