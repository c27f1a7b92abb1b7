"""nsqlookupd's registration database: producers, topics, channels, tombstones.

It mirrors nsqlookupd's ``RegistrationDB``: keys (:class:`Registration`) map to
the nsqd instances (:class:`PeerInfo`) registered under them, each possibly
tombstoned. It is pure state, with no I/O and no clock of its own; the TCP
front end (:mod:`.lookupd_tcp`), the HTTP front end (:mod:`.lookupd_http`) and
the server (:mod:`.lookupd`) sit above it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["PeerInfo", "RegisteredNsqd", "Registration", "RegistrationDB"]


@dataclass(frozen=True, order=True)
class Registration:
    """A key in the database: ``("client", "", "")``, ``("topic", t, "")`` or
    ``("channel", t, c)``."""

    category: str
    key: str
    subkey: str

    def matches(self, category: str, key: str, subkey: str) -> bool:
        """``"*"`` in ``key`` or ``subkey`` matches anything."""
        return self.category == category and key in ("*", self.key) and subkey in ("*", self.subkey)


@dataclass(eq=False)
class PeerInfo:
    """One nsqd connected over TCP; ``id`` is its remote ``host:port``.

    ``last_update`` is the clock reading of its last IDENTIFY or PING, in seconds.
    """

    id: str
    remote_address: str
    hostname: str
    broadcast_address: str
    tcp_port: int
    http_port: int
    version: str
    last_update: float = 0.0

    def as_json(self) -> dict[str, Any]:
        """The producer object of ``/lookup``."""
        return {
            "remote_address": self.remote_address,
            "hostname": self.hostname,
            "broadcast_address": self.broadcast_address,
            "tcp_port": self.tcp_port,
            "http_port": self.http_port,
            "version": self.version,
        }


@dataclass(eq=False)
class RegisteredNsqd:
    """One nsqd under a registration, and when ``/topic/tombstone`` hid it (clock seconds)."""

    peer: PeerInfo
    tombstoned_at: float | None = None

    def is_tombstoned(self, now: float, lifetime: float) -> bool:
        return self.tombstoned_at is not None and now - self.tombstoned_at < lifetime


@dataclass
class RegistrationDB:
    """Registrations and the producers behind each; pure, no I/O.

    Like nsqlookupd's, keys stay when their last producer leaves (so a topic
    stays listed), except ephemeral topics and channels, which go with it.
    """

    _map: dict[Registration, dict[str, RegisteredNsqd]] = field(default_factory=dict)

    def add_registration(self, key: Registration) -> None:
        """Create ``key`` with no producers if it does not exist."""
        self._map.setdefault(key, {})

    def add_producer(self, key: Registration, peer: PeerInfo) -> bool:
        """Add ``peer`` under ``key``; ``False`` if it was already there."""
        producers = self._map.setdefault(key, {})
        if peer.id in producers:
            return False
        producers[peer.id] = RegisteredNsqd(peer)
        return True

    def remove_producer(self, key: Registration, peer_id: str) -> tuple[bool, int]:
        """Remove one producer; returns (whether it was there, how many are left)."""
        producers = self._map.get(key)
        if producers is None:
            return False, 0
        removed = producers.pop(peer_id, None) is not None
        return removed, len(producers)

    def remove_registration(self, key: Registration) -> None:
        """Drop ``key`` and its producers."""
        self._map.pop(key, None)

    def find_registrations(self, category: str, key: str, subkey: str) -> list[Registration]:
        """Keys matching, ``"*"`` being a wildcard, in sorted order."""
        return sorted(k for k in self._map if k.matches(category, key, subkey))

    def find_producers(self, category: str, key: str, subkey: str) -> list[RegisteredNsqd]:
        """Producers under the matching keys, each peer once."""
        seen: dict[str, RegisteredNsqd] = {}
        for k in self.find_registrations(category, key, subkey):
            for peer_id, producer in self._map[k].items():
                seen.setdefault(peer_id, producer)
        return list(seen.values())

    def lookup_registrations(self, peer_id: str) -> list[Registration]:
        """Every key ``peer_id`` is registered under."""
        return sorted(k for k, producers in self._map.items() if peer_id in producers)
