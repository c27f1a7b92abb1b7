"""Where a client connection stands in the protocol, and which states allow what.

Part of the pure core (no I/O): :class:`~gnsqlite.protocol.client.ClientConnection`
moves through these states and refuses a command outside the states that allow it.
"""

from __future__ import annotations

import enum

__all__ = ["PUBLISH_STATES", "RESPOND_STATES", "ClientState"]


class ClientState(enum.Enum):
    """Where a connection stands in the protocol."""

    INIT = "init"
    IDENTIFYING = "identifying"
    UPGRADING = "upgrading"  # waiting for the I/O layer to wrap the transport
    AWAITING_UPGRADE_OK = "awaiting_upgrade_ok"
    AUTH_REQUIRED = "auth_required"
    AUTHENTICATING = "authenticating"
    READY = "ready"  # may publish or subscribe
    SUBSCRIBING = "subscribing"
    SUBSCRIBED = "subscribed"
    CLOSING = "closing"  # CLS sent; FIN, REQ and TOUCH are still allowed
    CLOSED = "closed"


# Tuples, not sets: membership is then an identity test per member, where a
# set would call Enum.__hash__ (Python code) once per FIN on the hot path.
#: The states in which PUB, MPUB and DPUB may be sent.
PUBLISH_STATES = (ClientState.SUBSCRIBED, ClientState.READY, ClientState.SUBSCRIBING)
#: The states in which RDY, FIN, REQ and TOUCH may be sent.
RESPOND_STATES = (ClientState.SUBSCRIBED, ClientState.CLOSING, ClientState.SUBSCRIBING)
