"""The handshake's answers on the client side: nsqd's IDENTIFY and AUTH replies, parsed.

Part of the pure core (no I/O): :class:`~gnsqlite.protocol.client.ClientConnection`
hands these functions a reply's bytes and acts on what they return.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import RemoteProtocolError
from . import defaults
from .frames import OK

__all__ = ["agreed_upgrades", "auth_identity", "identify_features"]

#: (IDENTIFY key, upgrade kind), in the order nsqd performs the upgrades.
_UPGRADE_FEATURES = (("tls_v1", "tls"), ("snappy", "snappy"), ("deflate", "deflate"))


def identify_features(data: bytes) -> tuple[dict[str, Any], bool]:
    """The features of an IDENTIFY reply and whether nsqd negotiated (JSON, not ``OK``).

    ``max_rdy_count`` defaults to nsqd's 2500. Raises ``RemoteProtocolError``
    for a reply that is neither ``OK`` nor a JSON object.
    """
    if data == OK:
        return {"max_rdy_count": defaults.MAX_RDY_COUNT}, False
    try:
        features = json.loads(data)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting too deep
        raise RemoteProtocolError(
            f"the IDENTIFY reply is neither OK nor JSON: {data[:64]!r}"
        ) from exc
    if not isinstance(features, dict):
        raise RemoteProtocolError(f"the IDENTIFY reply is not a JSON object: {data[:64]!r}")
    features.setdefault("max_rdy_count", defaults.MAX_RDY_COUNT)
    return features, True


def agreed_upgrades(requested: Mapping[str, Any], features: Mapping[str, Any]) -> list[str]:
    """The upgrades both sides asked for (``tls``, ``snappy``, ``deflate``), in nsqd's order."""
    return [kind for key, kind in _UPGRADE_FEATURES if requested.get(key) and features.get(key)]


def auth_identity(data: bytes) -> dict[str, Any]:
    """The identity of an AUTH reply ({} when it is JSON but not an object).

    Raises ``RemoteProtocolError`` when the reply is not JSON.
    """
    try:
        identity = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise RemoteProtocolError(f"the AUTH reply is not JSON: {data[:64]!r}") from exc
    return identity if isinstance(identity, dict) else {}
