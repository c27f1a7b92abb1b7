"""A producer's counters, ``stats()`` and ``health()``, and the publish timing hook.

:class:`PublishCounting` is a mixin of :class:`~gnsqlite.producer.Producer`:
it counts what was published (per topic and command) and what failed (per
:func:`error_code`), and reads the producer's connections for ``stats()``
and ``health()``. Nothing here blocks or sends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from .connection import Connection
from .errors import (
    ConnectionClosedError,
    NoConnectionsError,
    NSQConnectionError,
    NSQTimeoutError,
    ServerError,
)
from .health import ConnectionHealth, Health, build_health

log = logging.getLogger("gnsqlite.producer")

__all__ = ["PublishCounting", "PublishTiming", "error_code"]

#: Called with ``(topic, command, seconds)`` when a publish is answered or fails.
PublishTiming = Callable[[str, str, float], None]


def error_code(error: BaseException) -> str:
    """The ``code`` a failed publish is counted under in :meth:`Producer.stats`.

    nsqd's ``E_*`` code for an error nsqd sent (``"E_BAD_TOPIC"``), else
    ``"no_connections"`` (no nsqd took it in time), ``"timeout"`` (sent, not
    answered in time), ``"closed"`` (the producer closed first) or
    ``"connection"`` (the connection broke and no retry was possible).
    """
    if isinstance(error, ServerError):
        return error.code
    if isinstance(error, NoConnectionsError):
        return "no_connections"
    if isinstance(error, ConnectionClosedError):
        return "closed"
    if isinstance(error, NSQTimeoutError):
        return "timeout"
    if isinstance(error, NSQConnectionError):
        return "connection"
    return type(error).__name__


class PublishCounting:
    """Counters and read-only views of a producer; see the module docstring."""

    addresses: tuple[str, ...]
    _healthy: list[Connection]
    _last_error: dict[str, BaseException]
    _published: dict[tuple[str, str], list[int]]
    _errors: dict[str, int]
    _in_flight: int
    _publish_timing: PublishTiming | None
    _started: bool
    _closed: bool

    def count_publish(
        self,
        topic: str,
        command: str,
        messages: int,
        started: float | None,
        error: BaseException | None,
    ) -> None:
        """Count one publish that ended: answered OK (``error`` ``None``) or failed.

        The producer calls it itself; a front end that publishes on one of
        its connections directly (the pynsq ``Writer``) calls it too, so that
        :meth:`stats` counts everything. ``started`` is the
        ``time.monotonic()`` of the send (``None``: not timed). Does not block.
        """
        if error is None:
            counts = self._published.get((topic, command))
            if counts is None:
                counts = self._published[(topic, command)] = [0, 0]
            counts[0] += 1
            counts[1] += messages
        else:
            code = error_code(error)
            self._errors[code] = self._errors.get(code, 0) + 1
        timing = self._publish_timing
        if timing is not None and started is not None:
            try:
                timing(topic, command, time.monotonic() - started)
            except Exception:  # where answers are read: the other answers come first
                log.exception("producer: publish timing %r failed", timing)

    def track_in_flight(self, change: int) -> None:
        """Add ``change`` to the publishes waiting for an answer (for a front end, as above)."""
        self._in_flight += change

    def set_publish_timing(self, timing: PublishTiming | None) -> None:
        """Call ``timing(topic, command, seconds)`` when a publish ends (``None``: stop).

        ``seconds`` runs from the call to nsqd's answer or the failure,
        retries included. It runs in the greenlet that saw the answer (a
        connection's reader): it must not block; its exceptions are logged
        and ignored. :mod:`gnsqlite.metrics` uses it for its histogram.
        """
        self._publish_timing = timing

    def stats(self) -> dict[str, Any]:
        """What the producer published and how its connections are; does not block.

        ``connections``: every address with ``connected`` (it can publish
        now) and ``last_error`` (the text of the last error, or ``None``).
        ``publishes``: one row per topic and command (``"pub"``, ``"mpub"``,
        ``"dpub"``) with ``count`` (commands nsqd answered ``OK``) and
        ``messages`` (the messages in them). ``errors``: failed publishes by
        :func:`error_code`. ``in_flight``: publishes waiting for an answer or
        a connection. Counts are cumulative since the producer was built;
        ``totals`` sums them.
        """
        up = {conn.name for conn in self._healthy}
        publishes = [
            {"topic": topic, "command": command, "count": counts[0], "messages": counts[1]}
            for (topic, command), counts in sorted(self._published.items())
        ]
        return {
            "connections": [
                {
                    "address": address,
                    "connected": address in up,
                    "last_error": (
                        str(self._last_error[address]) if address in self._last_error else None
                    ),
                }
                for address in self.addresses
            ],
            "publishes": publishes,
            "errors": dict(sorted(self._errors.items())),
            "in_flight": self._in_flight,
            "totals": {
                "publishes": sum(p["count"] for p in publishes),
                "messages": sum(p["messages"] for p in publishes),
                "errors": sum(self._errors.values()),
                "in_flight": self._in_flight,
            },
        }

    def health(self) -> Health:
        """Whether the producer can publish now, for a readiness probe; does not block.

        ``ok`` when started, not closed and connected to at least one nsqd.
        Per address: connected or not, and the seconds since anything was read
        from it (heartbeats included). Sends nothing.
        """
        now = time.monotonic()
        up = {conn.name: conn for conn in self._healthy}
        rows = [
            ConnectionHealth(
                address,
                address in up,
                None,
                now - up[address].last_received if address in up else None,
            )
            for address in self.addresses
        ]
        return build_health(started=self._started, closed=self._closed, connections=rows)
