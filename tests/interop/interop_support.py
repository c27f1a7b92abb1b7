"""Support for driving the broker with third-party clients (pynsq on tornado, gnsq).

pynsq runs on a tornado IOLoop in the test thread: :class:`Loop` starts it
until a condition holds or a deadline passes, then stops it. The servers run
in child processes (and the auth server in its own thread), so they answer
while the loop has the thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import tornado.ioloop

from gnsqlite.testing import WaitTimeout


class Loop:
    """A fresh tornado IOLoop for one test."""

    def __init__(self) -> None:
        self.asyncio_loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.asyncio_loop)
        self.io_loop = tornado.ioloop.IOLoop.current()

    def run_until(
        self, predicate: Callable[[], Any], timeout: float = 10.0, message: str = ""
    ) -> Any:
        """Run the loop until ``predicate()`` is truthy (checked every 10 ms); return it.

        Raises :class:`WaitTimeout` after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        result: list[Any] = []

        def check() -> None:
            value = predicate()
            if value:
                result.append(value)
                self.io_loop.stop()
            elif time.monotonic() > deadline:
                self.io_loop.stop()

        periodic = tornado.ioloop.PeriodicCallback(check, 10)
        periodic.start()
        try:
            self.io_loop.start()
        finally:
            periodic.stop()
        if not result:
            what = message or getattr(predicate, "__name__", "condition")
            raise WaitTimeout(f"{what}: not true after {timeout} s")
        return result[0]

    def run_for(self, seconds: float) -> None:
        """Run the loop for ``seconds``."""
        handle = self.io_loop.call_later(seconds, self.io_loop.stop)
        try:
            self.io_loop.start()
        finally:
            self.io_loop.remove_timeout(handle)

    def close(self) -> None:
        """Run pending callbacks briefly, then close the loop and its file descriptors."""
        self.io_loop.close(all_fds=True)
        asyncio.set_event_loop(None)


def channel_stats(stats: dict[str, Any], topic: str, channel: str) -> dict[str, Any] | None:
    """The stats of one channel in a ``/stats?format=json`` document, or ``None``."""
    for t in stats.get("topics", []):
        if t["topic_name"] == topic:
            for c in t.get("channels", []):
                if c["channel_name"] == channel:
                    result: dict[str, Any] = c
                    return result
    return None
