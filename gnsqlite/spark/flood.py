"""Telling a flood (a backlog draining) from a stream, for holding a batch until it fills.

Pure: no gevent, no clock of its own (times are ``time.monotonic()``
seconds passed in).
"""

from __future__ import annotations

from collections import deque

__all__ = ["FLOOD_MESSAGES", "FLOOD_WINDOW", "FloodMeter"]

#: Seconds of the sliding window the arrivals are counted over.
FLOOD_WINDOW = 0.05

#: Messages arriving within one window that make a flood: 25,000 per second,
#: the rate at which the WAL source cuts its default segments (2500) half full
#: within its default ``walFlushInterval`` (0.05 s).
FLOOD_MESSAGES = 1250


class FloodMeter:
    """Counts the arrivals of the last ``window`` seconds; ``messages`` or more make a flood."""

    def __init__(self, window: float = FLOOD_WINDOW, messages: int = FLOOD_MESSAGES) -> None:
        self.window = window
        self.messages = messages
        self._arrivals: deque[tuple[float, int]] = deque()  # (time, count), oldest first
        self._count = 0  # messages in _arrivals

    def arrived(self, count: int, now: float) -> None:
        """``count`` messages arrived at ``now``."""
        self._arrivals.append((now, count))
        self._count += count
        self._trim(now)

    def flooding(self, now: float) -> bool:
        """True while the last ``window`` seconds brought a flood's worth of messages."""
        self._trim(now)
        return self._count >= self.messages

    def _trim(self, now: float) -> None:
        arrivals = self._arrivals
        while arrivals and arrivals[0][0] <= now - self.window:
            self._count -= arrivals.popleft()[1]
