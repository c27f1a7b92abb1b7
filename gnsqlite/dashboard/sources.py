"""What the dashboard watches: in-process consumers and producers, or nsqd over HTTP.

Each source turns one look at what it watches into a plain, JSON-ready
dict with :meth:`sample`. Counters are kept *cumulative* here (a consumer's
``stats()`` forgets a connection's counts when it goes away), so rates never
go negative, and changes between two looks (a connection opened or lost,
backoff starting or ending, starvation) become events.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Protocol

import gevent

from ..errors import NSQError
from ..http import LookupdClient, NsqdHTTPClient

__all__ = [
    "ConsumerSource",
    "HTTPSource",
    "ProducerSource",
    "Source",
    "make_source",
]

log = logging.getLogger(__name__)

_COUNTERS = ("received", "finished", "requeued")


class Source(Protocol):
    """Something the dashboard samples once per tick."""

    id: str
    kind: str
    title: str

    def sample(self) -> tuple[dict[str, Any], list[str]]:
        """``(state, events)``; may block on network I/O for a few seconds."""
        ...


class _Cumulative:
    """Counters that only grow, from per-connection counts that may reset."""

    def __init__(self) -> None:
        self.totals = dict.fromkeys(_COUNTERS, 0)
        self._last: dict[str, dict[str, int]] = {}

    def update(self, rows: Iterable[tuple[str, dict[str, int]]]) -> tuple[set[str], set[str]]:
        """Add the growth of each ``(key, counts)``; returns (new keys, vanished keys)."""
        seen: dict[str, dict[str, int]] = {}
        for key, counts in rows:
            old = self._last.get(key, {})
            for name in _COUNTERS:
                new = int(counts.get(name, 0))
                before = old.get(name, 0)
                self.totals[name] += new - before if new >= before else new
            seen[key] = {name: int(counts.get(name, 0)) for name in _COUNTERS}
        added = set(seen) - set(self._last)
        gone = set(self._last) - set(seen)
        self._last = seen
        return added, gone


class ConsumerSource:
    """A :class:`~gnsqlite.consumer.Consumer` in this process, read with ``stats()``."""

    kind = "consumer"

    def __init__(self, consumer: Any, index: int) -> None:
        self.consumer = consumer
        self.id = f"consumer{index}"
        self.title = f"consumer {consumer.topic}/{consumer.channel}"
        self._counts = _Cumulative()
        self._backoff_state: str | None = None
        self._starved: bool | None = None

    def sample(self) -> tuple[dict[str, Any], list[str]]:
        """The consumer's ``stats()`` with cumulative totals; does not block."""
        stats = self.consumer.stats()
        conns = stats["connections"]
        added, gone = self._counts.update((c["address"], c) for c in conns)
        events = [f"connected to {a}" for a in sorted(added)]
        events += [f"lost the connection to {a}" for a in sorted(gone)]
        backoff = stats.get("backoff") or {"state": "off"}
        state = str(backoff.get("state"))
        if self._backoff_state is not None and state != self._backoff_state:
            events.append(f"backoff: {self._backoff_state} -> {state}")
        self._backoff_state = state
        starved = bool(stats.get("starved"))
        if self._starved is not None and starved != self._starved:
            events.append("starved" if starved else "no longer starved")
        self._starved = starved
        totals = dict(stats["totals"])
        totals.update(self._counts.totals)
        return {
            "topic": stats["topic"],
            "channel": stats["channel"],
            "max_in_flight": stats["max_in_flight"],
            "totals": totals,
            "connections": [
                {k: c[k] for k in ("address", "rdy", "rdy_reason", "in_flight", *_COUNTERS)}
                for c in conns
            ],
            "backoff": backoff,
            "starved": starved,
            "handlers_running": stats.get("handlers_running", 0),
            "queued": stats.get("queued", 0),
        }, events


class ProducerSource:
    """A :class:`~gnsqlite.producer.Producer` in this process: its nsqd, which are up, its counts.

    ``counts`` holds the producer's ``stats()`` totals (publishes, messages,
    errors, in flight), ``publishes`` its rows per topic and command and
    ``errors`` its failed publishes by code; a growing error count becomes
    an event.
    """

    kind = "producer"

    def __init__(self, producer: Any, index: int) -> None:
        self.producer = producer
        self.id = f"producer{index}"
        self.title = "producer"
        self._up: set[str] | None = None
        self._errors: dict[str, int] = {}

    def sample(self) -> tuple[dict[str, Any], list[str]]:
        """The producer's addresses, healthy connections and counters; does not block."""
        addresses = list(self.producer.addresses)
        up = {conn.name for conn in self.producer.connections}
        events: list[str] = []
        if self._up is not None:
            events += [f"connected to {a}" for a in sorted(up - self._up)]
            events += [f"lost the connection to {a}" for a in sorted(self._up - up)]
        self._up = up
        stats = self.producer.stats() if callable(getattr(self.producer, "stats", None)) else {}
        errors = {str(k): int(v) for k, v in (stats.get("errors") or {}).items()}
        for code, count in sorted(errors.items()):
            grown = count - self._errors.get(code, 0)
            if grown > 0:
                events.append(f"{grown} publish error{'s' if grown > 1 else ''}: {code}")
        self._errors = errors
        return {
            "connections": [{"address": a, "connected": a in up} for a in addresses],
            "counts": dict(stats.get("totals") or {}),
            "publishes": list(stats.get("publishes") or []),
            "errors": errors,
        }, events


class HTTPSource:
    """nsqd (``/stats``) at HTTP addresses, given directly or found through nsqlookupd.

    Counters of the same topic and channel are summed over the nsqd. A
    channel's ``received`` is its ``message_count``, ``finished`` the sum of
    its clients' ``finish_count``, ``requeued`` its ``requeue_count``.
    """

    kind = "cluster"

    def __init__(
        self,
        nsqd_http_addresses: Iterable[str] = (),
        lookupd_http_addresses: Iterable[str] = (),
        index: int = 0,
        timeout: float = 2.0,
    ) -> None:
        self.nsqds = list(nsqd_http_addresses)
        self.lookupds = list(lookupd_http_addresses)
        for address in (*self.nsqds, *self.lookupds):
            NsqdHTTPClient(address)  # validates "host:port" now
        self.id = f"cluster{index}"
        self.title = (
            "nsqd " + ", ".join(self.nsqds)
            if self.nsqds
            else ("nsqlookupd " + ", ".join(self.lookupds))
        )
        self.timeout = timeout
        self._counts = _Cumulative()
        self._errors: dict[str, str] = {}
        self._known: set[str] | None = None

    def _addresses(self) -> tuple[list[str], dict[str, str]]:
        found = dict.fromkeys(self.nsqds)
        errors: dict[str, str] = {}
        for address in self.lookupds:
            try:
                for node in LookupdClient(address, self.timeout).nodes():
                    found[f"{node['broadcast_address']}:{node['http_port']}"] = None
            except NSQError as exc:
                errors[address] = str(exc)
        return list(found), errors

    def _stats_of(self, address: str) -> dict[str, Any] | NSQError:
        try:
            return NsqdHTTPClient(address, self.timeout).stats()
        except NSQError as exc:  # returned: a failed greenlet would print a traceback
            return exc

    def sample(self) -> tuple[dict[str, Any], list[str]]:
        """Ask every nsqd for ``/stats`` at once; blocks up to about twice ``timeout``."""
        addresses, errors = self._addresses()
        jobs = {a: gevent.spawn(self._stats_of, a) for a in addresses}
        gevent.joinall(list(jobs.values()), timeout=self.timeout + 0.5)
        topics: dict[str, dict[str, Any]] = {}
        rows: list[tuple[str, dict[str, int]]] = []
        for address, job in jobs.items():
            document = job.value if job.successful() else None
            if not isinstance(document, dict):
                job.kill(block=False)
                errors[address] = str(document or "no answer in time")
                continue
            for t in document.get("topics") or []:
                topic = topics.setdefault(
                    t["topic_name"],
                    {"topic": t["topic_name"], "depth": 0, "message_count": 0, "channels": {}},
                )
                topic["depth"] += int(t.get("depth", 0))
                topic["message_count"] += int(t.get("message_count", 0))
                for c in t.get("channels") or []:
                    _add_channel(topic["channels"], c)
                    counts = {
                        "received": int(c.get("message_count", 0)),
                        "finished": sum(
                            int(cl.get("finish_count", 0)) for cl in c.get("clients") or []
                        ),
                        "requeued": int(c.get("requeue_count", 0)),
                    }
                    rows.append((f"{address}/{t['topic_name']}/{c['channel_name']}", counts))
        self._counts.update(rows)
        events = []
        for address in sorted(set(errors) - set(self._errors)):
            events.append(f"{address}: {errors[address]}")
        for address in sorted(set(self._errors) - set(errors)):
            events.append(f"{address}: answering again")
        self._errors = errors
        up = set(addresses) - set(errors)
        if self._known is not None:
            events += [f"nsqd {a} appeared" for a in sorted(up - self._known)]
        self._known = up
        return {
            "nsqds": sorted(addresses),
            "errors": errors,
            "totals": dict(self._counts.totals),
            "topics": [
                {**t, "channels": [t["channels"][c] for c in sorted(t["channels"])]}
                for _, t in sorted(topics.items())
            ],
        }, events


def _add_channel(channels: dict[str, dict[str, Any]], c: dict[str, Any]) -> None:
    keys = ("depth", "in_flight_count", "requeue_count", "timeout_count", "message_count")
    channel = channels.setdefault(
        c["channel_name"], {"channel": c["channel_name"], "clients": 0, **dict.fromkeys(keys, 0)}
    )
    for key in keys:
        channel[key] += int(c.get(key, 0))
    channel["clients"] += int(c.get("client_count", len(c.get("clients") or [])))


def make_source(obj: Any, index: int) -> Source:
    """A source for a Consumer-like (has ``stats()``) or Producer-like (has ``addresses``)."""
    if isinstance(obj, (ConsumerSource, ProducerSource, HTTPSource)):
        return obj
    if callable(getattr(obj, "stats", None)) and hasattr(obj, "topic"):
        return ConsumerSource(obj, index)
    if hasattr(obj, "addresses") and hasattr(obj, "connections"):
        return ProducerSource(obj, index)
    raise TypeError(
        f"cannot watch {obj!r}: pass Consumers, Producers, or nsqd_http_addresses= /"
        " lookupd_http_addresses= for a cluster over HTTP"
    )
