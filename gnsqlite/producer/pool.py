"""A producer's connections to its nsqd: connecting and reconnecting.

:class:`Pool` connects to every address, keeps the connections that can
publish (:attr:`Pool.healthy`) and the last error of each address, and
reconnects one that failed or closed, after a jittered exponential backoff
(:class:`~gnsqlite.flow.Reconnect`), or at once when nsqd closed it after
refusing one command. It knows nothing of publishes: it calls
``on_connected()`` when a connection comes up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import gevent
import gevent.pool

from ..config import ConnectionConfig
from ..connection import Connection
from ..errors import ServerError
from ..flow import Reconnect
from ..timers import TimerWheel

__all__ = ["Pool"]

log = logging.getLogger(__name__)


class Pool:
    """The connections of one producer; see the module docstring.

    ``reconnect`` is the backoff policy; ``owner`` owns the reconnect
    timers (the producer cancels them when it closes). The constructor
    opens nothing; :meth:`start` connects.
    """

    def __init__(
        self,
        addresses: tuple[str, ...],
        connection_config: ConnectionConfig,
        reconnect: Reconnect,
        on_connected: Callable[[], None],
        owner: object,
    ) -> None:
        self.addresses = addresses
        self._config = connection_config
        self._reconnect = reconnect
        self._on_connected = on_connected
        self._owner = owner
        #: The connections that can publish now, in the order they came up.
        self.healthy: list[Connection] = []
        #: The last error of each address that has one (cleared when it connects).
        self.last_error: dict[str, BaseException] = {}
        self._conns: dict[str, Connection] = {}
        self._group = gevent.pool.Group()  # connection attempts
        self._wheel: TimerWheel | None = None
        self._closed = False

    def start(self, wheel: TimerWheel, timeout: float | None) -> None:
        """Connect to every nsqd; blocks until each has connected or failed once.

        ``timeout`` (seconds, ``None``: no limit) bounds the wait; addresses
        that fail keep reconnecting in the background (timers on ``wheel``).
        """
        self._wheel = wheel
        attempts = [self._group.spawn(self._connect, address) for address in self.addresses]
        gevent.joinall(attempts, timeout=timeout)

    def close(self) -> None:
        """Stop connecting and close every connection; blocks while attempts are killed."""
        self._closed = True
        self._group.kill(block=True)
        for conn in list(self._conns.values()):
            conn.close()
        self._conns.clear()
        self.healthy.clear()

    def join(self, timeout: float | None = None) -> bool:
        """Block until the connection attempts and each connection's greenlets ended."""
        done = bool(self._group.join(timeout=timeout))
        return done and all(conn.join(0) for conn in list(self._conns.values()))

    def _connect(self, address: str) -> None:
        if self._closed:
            return
        conn = Connection(address, self._config, on_close=self._on_close)
        try:
            conn.connect()
        except Exception as exc:
            self.last_error[address] = exc
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
        self.last_error.pop(address, None)
        self._conns[address] = conn
        self.healthy.append(conn)
        self._on_connected()

    def _on_close(self, conn: Connection, error: Exception | None) -> None:
        if conn in self.healthy:
            self.healthy.remove(conn)
        if self._conns.get(conn.name) is conn:
            del self._conns[conn.name]
        if error is not None:
            self.last_error[conn.name] = error
        if not self._closed:
            # nsqd closing after refusing one command (a fatal E_* error) says
            # nothing about its health: reconnect at once, without backoff.
            self._schedule_reconnect(conn.name, immediate=isinstance(error, ServerError))

    def _schedule_reconnect(self, address: str, immediate: bool = False) -> None:
        if self._closed or self._wheel is None:
            return
        delay = 0.0 if immediate else self._reconnect.failed(address)
        log.debug("producer: reconnecting to %s in %.2f s", address, delay)
        self._wheel.call_later(delay, self._group.spawn, self._connect, address, owner=self._owner)
