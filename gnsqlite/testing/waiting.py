"""Waiting for a condition in tests, without sleep-and-hope.

:func:`wait_until` polls a predicate with :func:`gevent.sleep` between tries,
so servers and clients running in the same hub keep working while a test
waits; in a thread without other greenlets it is an ordinary sleep.
:class:`HubStalls` measures how long the hub itself did not run (a loaded
machine leaving the process unscheduled), for a test whose bound is the
client's and not the machine's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import gevent

from ..errors import NSQTimeoutError

__all__ = ["HubStalls", "WaitTimeout", "wait_until"]

T = TypeVar("T")


class WaitTimeout(NSQTimeoutError, AssertionError):
    """The condition did not hold in time (an ``AssertionError`` for pytest)."""


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float = 5.0,
    interval: float = 0.02,
    message: str | None = None,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``predicate`` until it returns something truthy, and return that.

    A predicate typed ``X | None`` gives back an ``X``: ``None`` is never returned.

    Blocks the calling greenlet up to ``timeout`` seconds, trying every
    ``interval`` seconds (and once more at the deadline). Exceptions of the
    types in ``ignore`` count as "not yet"; others propagate. Raises
    :class:`WaitTimeout` naming ``message`` (or the predicate) and the last
    value or ignored error.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            result = predicate()
        except ignore as exc:
            last = exc
        else:
            if result:
                return result
            last = result
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            what = message or getattr(predicate, "__name__", repr(predicate))
            raise WaitTimeout(f"{what}: not true after {timeout} s (last: {last!r})")
        gevent.sleep(min(interval, remaining))


class HubStalls:
    """How long this process's hub did not run while a test watched it.

    A loaded machine can leave the test process unscheduled: timers fire late
    and the client holds what it has, through no fault of its own. A greenlet
    ticks every ``tick`` seconds; a tick late by ``threshold`` seconds or more
    counts one stall. :attr:`late` is the sum of every tick's lateness
    (seconds), :attr:`longest` the worst. :meth:`start` spawns the greenlet
    (never blocks), :meth:`stop` kills it; also a context manager.
    """

    def __init__(self, threshold: float = 0.2, tick: float = 0.05) -> None:
        self.threshold = threshold
        self.tick = tick
        self.count = 0
        self.longest = 0.0
        self.late = 0.0
        self._greenlet: gevent.Greenlet[[], None] | None = None

    def start(self) -> HubStalls:
        """Start watching (spawns one greenlet)."""
        self._greenlet = gevent.spawn(self._watch)
        return self

    def stop(self) -> None:
        """Stop watching; the figures stay."""
        if self._greenlet is not None:
            self._greenlet.kill()
            self._greenlet = None

    def __enter__(self) -> HubStalls:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _watch(self) -> None:
        while True:
            before = time.monotonic()
            gevent.sleep(self.tick)
            late = time.monotonic() - before - self.tick
            self.late += late
            self.longest = max(self.longest, late)
            if late >= self.threshold:
                self.count += 1
