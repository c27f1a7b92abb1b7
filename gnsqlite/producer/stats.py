"""A producer's counters, ``stats()`` and ``health()``, and the publish timing hook.

:class:`PublishStats` counts what a producer published (per topic and
command), what failed (per :func:`error_code`) and what is in flight, and
calls the timing hook; :meth:`PublishStats.report` and :func:`health_of`
read it with the producer's connections for ``stats()`` and ``health()``.
Nothing here blocks or sends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import (
    ConnectionClosedError,
    NoConnectionsError,
    NSQConnectionError,
    NSQTimeoutError,
    ServerError,
)
from ..health import ConnectionHealth, Health, build_health
from .attempt import PublishConnection

log = logging.getLogger(__name__)

__all__ = ["PublishStats", "PublishTiming", "error_code", "health_of"]

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


class Published:
    """The publishes of one topic and command answered OK, and the messages in them."""

    __slots__ = ("messages", "publishes")

    def __init__(self) -> None:
        self.publishes = 0
        self.messages = 0


class PublishStats:
    """The counters of one producer; see the module docstring."""

    __slots__ = (
        "_last",
        "_last_command",
        "_last_topic",
        "errors",
        "in_flight",
        "published",
        "timing",
    )

    def __init__(self) -> None:
        #: (topic, command) -> what was published
        self.published: dict[tuple[str, str], Published] = {}
        # The counts of the last (topic, command) counted, found again by identity:
        # a producer publishes to the same topic call after call.
        self._last_topic: str | None = None
        self._last_command: str | None = None
        self._last = Published()  # counts nothing until a publish is counted
        #: error_code() -> failed publishes
        self.errors: dict[str, int] = {}
        #: Publishes waiting for an answer (or a connection).
        self.in_flight = 0
        #: Called when a publish ends (``None``: nothing is); see :meth:`count`.
        self.timing: PublishTiming | None = None

    def count(
        self,
        topic: str,
        command: str,
        messages: int,
        started: float | None,
        error: BaseException | None,
    ) -> None:
        """Count one publish that ended: answered OK (``error`` ``None``) or failed.

        ``started`` is the ``time.monotonic()`` of the call (``None``: not
        timed): :attr:`timing` gets the seconds since. Its exceptions are
        logged and ignored (it runs where answers are read: the other
        answers come first). Does not block.
        """
        if error is None:
            counts = self._last
            if topic is not self._last_topic or command is not self._last_command:
                counts = self._counts(topic, command)
            counts.publishes += 1
            counts.messages += messages
        else:
            code = error_code(error)
            self.errors[code] = self.errors.get(code, 0) + 1
        timing = self.timing
        if timing is not None and started is not None:
            try:
                timing(topic, command, time.monotonic() - started)
            except Exception:
                log.exception("producer: publish timing %r failed", timing)

    def _counts(self, topic: str, command: str) -> Published:
        """The counts of ``topic`` and ``command`` (made on first use), remembered as the last."""
        counts = self.published.get((topic, command))
        if counts is None:
            counts = self.published[(topic, command)] = Published()
        self._last_topic, self._last_command, self._last = topic, command, counts
        return counts

    def report(
        self,
        addresses: Iterable[str],
        healthy: Iterable[PublishConnection],
        last_error: Mapping[str, BaseException],
    ) -> dict[str, Any]:
        """The document of :meth:`Producer.stats <gnsqlite.producer.Producer.stats>`.

        ``addresses`` are every nsqd of the producer, ``healthy`` the
        connections that can publish now, ``last_error`` the last error per
        address.
        """
        up = {conn.name for conn in healthy}
        publishes = [
            {"topic": topic, "command": command, "count": c.publishes, "messages": c.messages}
            for (topic, command), c in sorted(self.published.items())
        ]
        return {
            "connections": [
                {
                    "address": address,
                    "connected": address in up,
                    "last_error": str(last_error[address]) if address in last_error else None,
                }
                for address in addresses
            ],
            "publishes": publishes,
            "errors": dict(sorted(self.errors.items())),
            "in_flight": self.in_flight,
            "totals": {
                "publishes": sum(p["count"] for p in publishes),
                "messages": sum(p["messages"] for p in publishes),
                "errors": sum(self.errors.values()),
                "in_flight": self.in_flight,
            },
        }


def health_of(
    addresses: Iterable[str],
    healthy: Iterable[PublishConnection],
    *,
    started: bool,
    closed: bool,
) -> Health:
    """The document of :meth:`Producer.health <gnsqlite.producer.Producer.health>`.

    ``ok`` when started, not closed and connected to at least one nsqd. Per
    address: connected or not, and the seconds since anything was read from
    it (heartbeats included). Does not block.
    """
    now = time.monotonic()
    up = {conn.name: conn for conn in healthy}
    rows = [
        ConnectionHealth(
            address,
            address in up,
            None,
            now - up[address].last_received if address in up else None,
        )
        for address in addresses
    ]
    return build_health(started=started, closed=closed, connections=rows)
