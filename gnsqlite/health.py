"""What a readiness probe needs to know of a Consumer or a Producer.

:meth:`Consumer.health() <gnsqlite.consumer.Consumer.health>` and
:meth:`Producer.health() <gnsqlite.producer.Producer.health>` return a
:class:`Health`: whether the client can do its work now, the nsqd it is
connected to, how long ago each connection last delivered a message and last
heard anything (a heartbeat counts), the backoff state, and the reasons when
it is not ok. Building one reads counters only: it never blocks and sends
nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["ConnectionHealth", "Health"]


@dataclass(frozen=True)
class ConnectionHealth:
    """One nsqd as a readiness probe sees it; ages are seconds, ``None`` for never."""

    address: str
    connected: bool
    #: Seconds since the last message arrived on this connection (``None``: none yet,
    #: or a producer's connection, which receives no messages).
    last_message_age: float | None
    #: Seconds since anything (a heartbeat, a response, a message) was read from it
    #: (``None``: not connected).
    last_frame_age: float | None


@dataclass(frozen=True)
class Health:
    """A client's health: ``ok`` is true when it is started, not closed, and connected.

    ``connected`` lists the nsqd (``"host:port"``) connected now,
    ``connections`` every nsqd the client knows with its ages, ``backoff``
    the consumer's backoff state (``"off"``, ``"normal"``, ``"window"``,
    ``"probing"``; always ``"off"`` for a producer) and ``backoff_level`` its
    level; ``reasons`` says, one short sentence each, why ``ok`` is false.
    Backoff does not make a client unhealthy: it is the client protecting
    itself from failing handlers.
    """

    ok: bool
    connected: tuple[str, ...]
    connections: tuple[ConnectionHealth, ...]
    backoff: str = "off"
    backoff_level: int = 0
    reasons: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The same fields as a JSON-ready dict (tuples become lists)."""
        data = asdict(self)
        data["connected"] = list(self.connected)
        data["reasons"] = list(self.reasons)
        data["connections"] = [asdict(c) for c in self.connections]
        return data


def build_health(
    *,
    started: bool,
    closed: bool,
    connections: Iterable[ConnectionHealth],
    backoff: str = "off",
    backoff_level: int = 0,
) -> Health:
    """A :class:`Health` from what a client knows, with the reasons when it is not ok."""
    conns = tuple(sorted(connections, key=lambda c: c.address))
    connected = tuple(c.address for c in conns if c.connected)
    reasons: list[str] = []
    if closed:
        reasons.append("closed")
    elif not started:
        reasons.append("not started: call start()")
    elif not connected:
        down = ", ".join(c.address for c in conns) or "none known yet"
        reasons.append(f"no nsqd connected (known: {down})")
    return Health(
        ok=not reasons,
        connected=connected,
        connections=conns,
        backoff=backoff,
        backoff_level=backoff_level,
        reasons=tuple(reasons),
    )
