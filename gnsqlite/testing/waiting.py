"""Waiting for a condition in tests, without sleep-and-hope.

:func:`wait_until` polls a predicate with :func:`gevent.sleep` between tries,
so servers and clients running in the same hub keep working while a test
waits; in a thread without other greenlets it is an ordinary sleep.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import gevent

from ..errors import NSQTimeoutError

__all__ = ["WaitTimeout", "wait_until"]

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
