"""A producer's connections to its nsqd: connecting, reconnecting, and nsqd that come and go.

:class:`Pool` connects to every address, keeps the connections that can
publish (:attr:`Pool.healthy`) and the last error of each address, and
reconnects one that failed or closed, after a jittered exponential backoff
(:class:`~gnsqlite.flow.Reconnect`), or at once when nsqd closed it after
refusing one command. It knows nothing of publishes: it calls
``on_connected()`` when a connection comes up.

Its addresses are the static ones, kept for the pool's life, and the
discovered ones lookupd lists (:meth:`Pool.discover`): a newly listed nsqd is
connected; one no longer listed leaves the pool. A connection that leaves
takes no new publish and is closed once every publish sent on it has its
answer (looked at every :data:`DRAIN_CHECK` seconds by a timer: the path of
a publish's answer pays nothing for it), or when ``drain_timeout`` ends:
what it still waits for then fails with a connection error, which the
router sends again elsewhere. Nothing sent is dropped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

import gevent
import gevent.pool

from ..config import ConnectionConfig
from ..connection import Connection
from ..errors import ServerError
from ..flow import Reconnect
from ..timers import Timer, TimerWheel
from .attempt import PublishConnection

__all__ = ["DRAIN_CHECK", "Pool"]

log = logging.getLogger(__name__)

#: Seconds between two looks at a leaving connection's unanswered publishes.
DRAIN_CHECK = 0.02


class Pool:
    """The connections of one producer; see the module docstring.

    ``static`` are the addresses given (``"host:port"``); ``reconnect`` is
    the backoff policy; ``drain_timeout`` (seconds) bounds how long a
    connection that left waits for its answers; ``owner`` owns the
    reconnect and drain timers (the producer cancels them when it closes).
    The constructor opens nothing; :meth:`start` connects.
    """

    def __init__(
        self,
        static: tuple[str, ...],
        connection_config: ConnectionConfig,
        reconnect: Reconnect,
        on_connected: Callable[[], None],
        owner: object,
        drain_timeout: float = 5.0,
    ) -> None:
        self.static = static
        #: The nsqd lookupd listed last (not static ones), in the order they came.
        self.discovered: list[str] = []
        self._config = connection_config
        self._reconnect = reconnect
        self._on_connected = on_connected
        self._owner = owner
        self._drain_timeout = drain_timeout
        #: The connections that can publish now, in the order they came up (typed with
        #: the protocol too: the router's compiled code then takes a test's fake).
        self.healthy: list[Connection | PublishConnection] = []
        #: The last error of each address that has one (cleared when it connects).
        self.last_error: dict[str, BaseException] = {}
        #: Connections of nsqd that left the pool, until their last answer (or
        #: the drain timeout), with the timer that looks at them.
        self.draining: dict[Connection, Timer] = {}
        #: nsqd discovered and dropped, cumulative.
        self.added = 0
        self.removed = 0
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, gevent.Greenlet[..., None]] = {}
        self._retries: dict[str, Timer] = {}  # one pending reconnect per address
        self._group = gevent.pool.Group()  # connection attempts and closes
        self._wheel: TimerWheel | None = None
        self._closed = False

    @property
    def addresses(self) -> tuple[str, ...]:
        """Every nsqd of the pool: the static ones, then the discovered ones."""
        return (*self.static, *self.discovered)

    def start(self, wheel: TimerWheel) -> None:
        """Connect to every static nsqd in the background (timers on ``wheel``). Does not block."""
        self._wheel = wheel
        for address in self.addresses:
            self._spawn_connect(address)

    def wait_connecting(self, timeout: float | None) -> None:
        """Block until every connection attempt under way has connected or failed once.

        ``timeout`` (seconds, ``None``: no limit) bounds the wait.
        """
        gevent.joinall(list(self._connecting.values()), timeout=timeout)

    def close(self) -> None:
        """Stop connecting and close every connection; blocks while attempts are killed."""
        self._closed = True
        self._group.kill(block=True)
        for conn in [*self._conns.values(), *self.draining]:
            conn.close()
        self._conns.clear()
        self.draining.clear()
        self.healthy.clear()

    def join(self, timeout: float | None = None) -> bool:
        """Block until the connection attempts and each connection's greenlets ended."""
        done = bool(self._group.join(timeout=timeout))
        return done and all(conn.join(0) for conn in list(self._conns.values()))

    # -- nsqd that come and go ---------------------------------------------

    def discover(self, found: Iterable[str]) -> None:
        """Make the discovered nsqd those of ``found`` (``"host:port"``); does not block.

        A new one is connected; one no longer found leaves (see the module
        docstring). An empty ``found`` changes nothing: a lookupd that lists
        no nsqd has more likely just restarted (nsqd register again within
        seconds) than lost the whole cluster, and a publish to an nsqd that
        is gone fails over anyway.
        """
        listed = set(found)
        if self._closed or not listed:
            return
        for address in sorted(listed - set(self.addresses)):
            log.info("producer: lookupd lists nsqd %s: added", address)
            self.discovered.append(address)
            self.added += 1
            self._spawn_connect(address)
        for address in [a for a in self.discovered if a not in listed]:
            log.info("producer: lookupd no longer lists nsqd %s: removed", address)
            self.discovered.remove(address)
            self.removed += 1
            self._leave(address)

    def _leave(self, address: str) -> None:
        """``address`` left the pool: no new publish, no reconnect; drain its connection."""
        retry = self._retries.pop(address, None)
        if retry is not None:
            retry.cancel()
        self.last_error.pop(address, None)
        conn = self._conns.pop(address, None)
        if conn is None:
            return  # not connected; an attempt under way closes what it opens
        if conn in self.healthy:
            self.healthy.remove(conn)
        if not conn.pending or self._wheel is None:
            self._close_later(conn)
            return
        deadline = time.monotonic() + self._drain_timeout
        self.draining[conn] = self._wheel.call_every(
            DRAIN_CHECK, self._check_drained, conn, deadline, owner=self._owner
        )

    def _check_drained(self, conn: Connection, deadline: float) -> None:
        """Close a draining connection once answered, or at ``deadline`` (a timer's call)."""
        if conn.pending and time.monotonic() < deadline:
            return
        timer = self.draining.pop(conn, None)
        if timer is not None:
            timer.cancel()
        log.debug("producer: closing %s (left the pool, %d unanswered)", conn.name, conn.pending)
        self._close_later(conn)

    def _close_later(self, conn: Connection) -> None:
        if not self._closed:
            self._group.spawn(conn.close)  # blocks: not in the caller's greenlet (the hub)

    # -- connecting ----------------------------------------------------------

    def _spawn_connect(self, address: str) -> None:
        self._retries.pop(address, None)
        if self._closed or address in self._connecting or address in self._conns:
            return
        self._connecting[address] = self._group.spawn(self._connect, address)

    def _connect(self, address: str) -> None:
        conn = Connection(address, self._config, on_close=self._on_close)
        try:
            conn.connect()
        except Exception as exc:
            self._connecting.pop(address, None)
            if address not in self.addresses:
                return  # it left the pool meanwhile
            self.last_error[address] = exc
            # Warn once per outage; the retries that follow are debug noise.
            level = logging.DEBUG if self._reconnect.failures(address) else logging.WARNING
            log.log(level, "producer: cannot connect: %s", exc)
            self._schedule_reconnect(address)
            return
        except BaseException:
            self._connecting.pop(address, None)
            raise
        self._connecting.pop(address, None)
        if self._closed or address not in self.addresses:
            self._close_later(conn)
            return
        log.debug("producer: connected to %s", address)
        self._reconnect.succeeded(address)
        self.last_error.pop(address, None)
        self._conns[address] = conn
        self.healthy.append(conn)
        self._on_connected()

    def _on_close(self, conn: Connection, error: Exception | None) -> None:
        if conn in self.draining:
            self.draining.pop(conn).cancel()
            return  # it left the pool: not reconnected
        if conn in self.healthy:
            self.healthy.remove(conn)
        if self._conns.get(conn.name) is not conn:
            return  # closed after it left the pool, or replaced
        del self._conns[conn.name]
        if error is not None:
            self.last_error[conn.name] = error
        if not self._closed:
            # nsqd closing after refusing one command (a fatal E_* error) says
            # nothing about its health: reconnect at once, without backoff.
            self._schedule_reconnect(conn.name, immediate=isinstance(error, ServerError))

    def _schedule_reconnect(self, address: str, immediate: bool = False) -> None:
        if self._closed or self._wheel is None or address not in self.addresses:
            return
        delay = 0.0 if immediate else self._reconnect.failed(address)
        log.debug("producer: reconnecting to %s in %.2f s", address, delay)
        pending = self._retries.pop(address, None)
        if pending is not None:
            pending.cancel()
        self._retries[address] = self._wheel.call_later(
            delay, self._spawn_connect, address, owner=self._owner
        )
