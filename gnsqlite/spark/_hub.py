"""A gevent hub running in its own thread, callable from any other thread.

The Spark connector runs gnsqlite's gevent client inside Spark's Python
processes, which are neither monkey-patched nor gevent-driven: the thread
that Spark calls into (``latestOffset``, ``commit``, ``write``) blocks on
Spark's own pipes, so a hub sharing it would stall and miss nsqd's
heartbeats. :class:`HubThread` gives the client a daemon thread with its own
hub; :meth:`HubThread.call` runs a function in a greenlet there and blocks
the calling thread (not the hub) until it returns.

Nothing here patches anything; the threads are real threads because Spark's
worker processes never patch ``threading``.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import gevent
import gevent.event

__all__ = ["HubThread", "HubThreadError"]

log = logging.getLogger(__name__)

_R = TypeVar("_R")


def _nothing() -> None:
    """The keep-alive watcher's callback."""


class HubThreadError(RuntimeError):
    """The hub thread is not running (never started, stopped, or died)."""


class HubThread:
    """A daemon thread whose gevent hub runs the connector's client.

    The constructor starts nothing; :meth:`start` starts the thread and
    blocks until its hub is ready; :meth:`stop` ends it. ``name`` names the
    thread (visible in thread dumps).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._loop: Any = None
        self._stop_event: gevent.event.Event | None = None
        self._stopped = False

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<HubThread {self.name} {state}>"

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`stop` while the thread is alive."""
        return self._thread is not None and self._thread.is_alive() and not self._stopped

    def start(self, timeout: float = 10.0) -> None:
        """Start the thread; blocks up to ``timeout`` seconds until its hub runs."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise HubThreadError(f"{self.name}: the hub thread did not start in {timeout} s")

    def _run(self) -> None:
        hub = gevent.get_hub()  # a new hub, owned by this thread
        self._loop = hub.loop
        self._stop_event = gevent.event.Event()
        # An active async watcher keeps the loop running while nothing else
        # is scheduled; otherwise waiting on the stop event would raise LoopExit.
        keepalive = hub.loop.async_()
        keepalive.start(_nothing)
        self._ready.set()
        try:
            self._stop_event.wait()
        finally:
            self._stopped = True
            keepalive.close()
            hub.destroy(destroy_loop=True)

    def call(self, func: Callable[..., _R], *args: Any, timeout: float | None = None) -> _R:
        """Run ``func(*args)`` in a new greenlet of the hub thread and return its result.

        Blocks the calling thread up to ``timeout`` seconds (``None``:
        forever); re-raises what ``func`` raised; raises
        :class:`TimeoutError` when it takes longer (``func`` keeps running)
        and :class:`HubThreadError` when the hub is not running. Must not be
        called from the hub thread itself.
        """
        return self.submit(func, *args).result(timeout)

    def submit(self, func: Callable[..., _R], *args: Any) -> concurrent.futures.Future[_R]:
        """Like :meth:`call` but returns a ``concurrent.futures.Future`` at once."""
        if not self.running or self._loop is None:
            raise HubThreadError(f"{self.name}: the hub thread is not running")
        future: concurrent.futures.Future[_R] = concurrent.futures.Future()

        def invoke() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = func(*args)
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)

        self._loop.run_callback_threadsafe(gevent.spawn, invoke)
        return future

    def stop(self, timeout: float = 10.0) -> None:
        """End the hub thread; blocks up to ``timeout`` seconds. Safe to call twice.

        Close what runs in the hub (with :meth:`call`) first: greenlets
        still running are abandoned with the hub.
        """
        thread = self._thread
        if thread is None or self._stopped:
            return
        event = self._stop_event
        if event is not None and self._loop is not None:
            self._loop.run_callback_threadsafe(event.set)
        thread.join(timeout)
        if thread.is_alive():
            log.warning("%s: the hub thread did not end within %.1f s", self.name, timeout)
