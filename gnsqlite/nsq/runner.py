"""``run()``: start every Reader and Writer, wait for SIGINT or SIGTERM, close them.

A Reader or Writer registers itself when it is built (opening nothing);
:func:`run` starts the registered ones, and those built while it runs, then
blocks until SIGINT, SIGTERM or :func:`stop`. It then closes every Reader
(drained: in-flight handlers finish and answer, up to 30 s) and then every
Writer (publishes still waiting for nsqd's answer get it, up to 5 s). When
there is something to wait for, it says so at once in a warning (how many
messages and publishes, how long at most). A second SIGINT or SIGTERM
skips the wait: the messages still unanswered are requeued (nsqd delivers
them again at once), the handlers still running are stopped, and the
publishes still unanswered fail with ``ConnectionClosedError``. If the
program imported tornado, tornado's IOLoop keeps running alongside (see
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

    #: 0 for Readers, closed first (their handlers may publish), 1 for Writers.
    close_order: int
    #: Seconds :meth:`close` waits at most for answers.
    close_timeout: float

    @property
    def started(self) -> bool:
        """Whether :meth:`start` ran."""
        ...

    def pending(self) -> int:
        """How many messages or publishes :meth:`close` would wait for."""
        ...

    def skip_close_wait(self) -> int:
        """Give up waiting for what :meth:`pending` counts; returns how many. Does not block."""
        ...

    def start(self) -> None:
        """Connect and begin working."""
        ...

    def close(self, timeout: float | None = None) -> object:
        """Stop gracefully; blocks up to ``timeout`` s (``None``: :attr:`close_timeout`)."""
        ...


class _Registry:
    """The clients :func:`run` drives, and the events it waits on."""

    def __init__(self) -> None:
        self.clients: list[Client] = []
        self.changed = gevent.event.Event()
        self.stopping: gevent.event.Event | None = None
        #: Set by a second signal: closes give up waiting for answers.
        self.hurry = gevent.event.Event()


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

    Then closes every Reader (drained, up to 30 s), then every Writer (up
    to 5 s), saying in a warning what it waits for, and returns. A second
    SIGINT or SIGTERM meanwhile stops the waiting: unanswered messages are
    requeued at once (see the module docstring). Must be called from the
    main thread (signal handlers).
    """
    stopping = gevent.event.Event()
    _registry.stopping = stopping
    _registry.hurry.clear()

    signalled = False

    def on_signal(signum: int) -> None:
        nonlocal signalled
        signalled = True
        if stopping.is_set():
            _skip_close_waits(signal.Signals(signum).name)
        else:
            log.info("%s: closing every Reader and Writer", signal.Signals(signum).name)
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
        stopping.set()  # a signal from now on skips the waits
        try:
            _close_all(" again" if signalled else "")
        finally:
            for handler in handlers:
                handler.cancel()
            helpers.kill(block=True)


def _close_all(again: str = "") -> None:
    # Readers (close_order 0) first: their handlers may still publish with a Writer.
    clients = sorted(_registry.clients, key=lambda c: c.close_order)
    _announce_waits(clients, again)
    for client in clients:
        try:
            client.close(0.0 if _registry.hurry.is_set() else None)
        except Exception:
            log.exception("closing %r failed", client)
        unregister(client)


def _announce_waits(clients: list[Client], again: str) -> None:
    """Say what the closes will wait for, and how to skip it, if anything. Does not block."""
    waits = []
    for what, order in (("messages the handlers have not answered", 0), ("publishes", 1)):
        group = [c for c in clients if c.close_order == order]
        count = sum(c.pending() for c in group)
        if count:
            longest = max(c.close_timeout for c in group)
            waits.append(f"up to {longest:g} s for {count} {what}")
    if waits:
        log.warning(
            "closing: waiting %s; press Ctrl-C%s (or send SIGTERM) to stop waiting:"
            " unanswered messages are then requeued at once",
            " and ".join(waits),
            again,
        )


def _skip_close_waits(signame: str) -> None:
    """A second signal: every close gives up waiting for answers. Does not block."""
    _registry.hurry.set()
    requeued = published = 0
    for client in list(_registry.clients):
        skipped = client.skip_close_wait()
        if client.close_order == 0:
            requeued += skipped
        else:
            published += skipped
    unanswered = f", {published} publishes fail unanswered (ConnectionClosedError)"
    log.warning(
        "%s again: not waiting: requeued %d unanswered messages (nsqd delivers them again"
        " at once)%s",
        signame,
        requeued,
        unanswered if published else "",
    )
