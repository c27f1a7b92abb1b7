"""Read-only views of a consumer: its ``stats()`` document and its ``health()``.

Both read the collaborators (link set, flow control, dispatcher, batcher,
leases, dead-letter publisher) and change nothing; neither blocks nor sends.
"""

from __future__ import annotations

import time
from typing import Any

from ..health import ConnectionHealth, Health, build_health
from .dispatch import Dispatcher
from .flow_control import FlowControl
from .lease import Leases
from .links import LinkSet

__all__ = ["health_of", "stats_of"]

_TOTALS = ("rdy", "rdy_remaining", "last_rdy", "in_flight", "received", "finished", "requeued")


def stats_of(
    topic: str,
    channel: str,
    links: LinkSet,
    flow: FlowControl,
    dispatcher: Dispatcher,
    dead_letters: Any,
    leases: Leases,
) -> dict[str, Any]:
    """The document :meth:`Consumer.stats() <gnsqlite.consumer.Consumer.stats>` returns."""
    now = time.monotonic()
    wall_offset = time.time() - now  # the planner's monotonic times as wall-clock
    planner = flow.planner
    conns = []
    for name, link in links.links.items():
        cf = planner.conns.get(name)
        last = cf.last_message_at if cf else None
        conns.append(
            {
                "address": name,
                "rdy": cf.last_rdy if cf else 0,
                "rdy_remaining": max(0, cf.rdy) if cf else 0,
                "last_rdy": cf.last_rdy if cf else 0,
                "rdy_target": cf.target if cf else 0,
                "rdy_reason": cf.reason if cf else "closed",
                "in_flight": cf.in_flight if cf else 0,
                **link.counts(),
                "last_message_time": None if last is None else last + wall_offset,
            }
        )
    totals = {key: sum(c[key] for c in conns) for key in _TOTALS}  # type: ignore[misc]
    by_nsqd = links.by_nsqd()
    for key in ("given_up", "expired", "touches"):  # counted outside the links
        totals[key] = sum(c[key] for c in by_nsqd.values())
    batcher = dispatcher.batcher
    return {
        "topic": topic,
        "channel": channel,
        "max_in_flight": planner.max_in_flight,
        "connections": conns,
        "totals": totals,
        "by_nsqd": by_nsqd,
        "backoff": flow.backoff.describe(now) if flow.backoff else {"state": "off"},
        "starved": flow.is_starved(),
        "handlers_running": len(dispatcher.running),
        "queued": dispatcher.queued,
        "dead_letters": None if dead_letters is None else dead_letters.stats(),
        "leases": leases.stats(),
        **({"batches": batcher.stats()} if batcher is not None else {}),
    }


def health_of(links: LinkSet, flow: FlowControl, started: bool, closed: bool) -> Health:
    """The :class:`~gnsqlite.health.Health` :meth:`Consumer.health()
    <gnsqlite.consumer.Consumer.health>` returns."""
    now = time.monotonic()
    rows: dict[str, ConnectionHealth] = {
        address: ConnectionHealth(address, False, None, None)
        for address in (*links.static, *links.connecting)
    }
    for name, link in links.links.items():
        cf = flow.planner.conns.get(name)
        last = cf.last_message_at if cf else None
        rows[name] = ConnectionHealth(
            name,
            not link.conn.closed,
            None if last is None else now - last,
            now - link.conn.last_received,
        )
    backoff = flow.backoff
    return build_health(
        started=started,
        closed=closed,
        connections=rows.values(),
        backoff=backoff.state if backoff is not None else "off",
        backoff_level=backoff.level if backoff is not None else 0,
    )
