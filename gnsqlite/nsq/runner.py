"""``run()``: start every Reader and Writer, wait for SIGINT or SIGTERM, close them.

A Reader or Writer registers itself when it is built (opening nothing);
:func:`run` starts the registered ones, and those built while it runs, then
blocks until SIGINT, SIGTERM or :func:`stop`. It then closes every Reader
(drained: in-flight handlers finish and answer) and then every Writer
(publishes still waiting for nsqd's answer get it). If the program imported
tornado, tornado's IOLoop keeps running alongside (see
:mod:`gnsqlite.nsq.tornado_bridge`).
"""

from __future__ import annotations

import logging
import signal
from typing import Protocol

import gevent
import gevent.event
import gevent.pool

from . import tornado_bridge

__all__ = ["Client", "register", "run", "stop", "unregister"]

log = logging.getLogger(__name__)


class Client(Protocol):
    """A Reader or a Writer, as :func:`run` drives it."""

    @property
    def started(self) -> bool:
        """Whether :meth:`start` ran."""
        ...

    def start(self) -> None:
        """Connect and begin working."""
        ...

    def close(self) -> None:
        """Stop gracefully; blocks until done."""
        ...


class _Registry:
    """The clients :func:`run` drives, and the events it waits on."""

    def __init__(self) -> None:
        self.clients: list[Client] = []
        self.changed = gevent.event.Event()
        self.stopping: gevent.event.Event | None = None


_registry = _Registry()


def register(client: Client) -> None:
    """Let :func:`run` start and close ``client``. Does not block."""
    if client not in _registry.clients:
        _registry.clients.append(client)
        _registry.changed.set()


def unregister(client: Client) -> None:
    """Forget ``client`` (after it was closed). Does not block."""
    if client in _registry.clients:
        _registry.clients.remove(client)


def stop() -> None:
    """Make a running :func:`run` close everything and return, as a signal would.

    Not part of pynsq (which stops with ``IOLoop.current().stop()``). Does not block.
    """
    if _registry.stopping is not None:
        _registry.stopping.set()


def run() -> None:
    """Start every Reader and Writer and block until SIGINT, SIGTERM or :func:`stop`.

    Then closes every Reader (drained), then every Writer, and returns.
    Must be called from the main thread (signal handlers).
    """
    stopping = gevent.event.Event()
    _registry.stopping = stopping

    def on_signal(signum: int) -> None:
        log.info("signal %d: closing every Reader and Writer", signum)
        stopping.set()

    handlers = [
        gevent.signal_handler(signal.SIGTERM, on_signal, signal.SIGTERM),
        gevent.signal_handler(signal.SIGINT, on_signal, signal.SIGINT),
    ]
    helpers = gevent.pool.Group()
    if tornado_bridge.tornado_in_use():
        helpers.spawn(tornado_bridge.pump)
    try:
        while not stopping.is_set():
            _registry.changed.clear()
            for client in list(_registry.clients):
                if not client.started and not stopping.is_set():
                    client.start()
            gevent.wait([stopping, _registry.changed], count=1)
    finally:
        _registry.stopping = None
        for handler in handlers:
            handler.cancel()
        _close_all()
        helpers.kill(block=True)


def _close_all() -> None:
    # Readers (close_order 0) first: their handlers may still publish with a Writer.
    clients = sorted(_registry.clients, key=lambda c: getattr(c, "close_order", 1))
    for client in clients:
        try:
            client.close()
        except Exception:
            log.exception("closing %r failed", client)
        unregister(client)
