"""Where a client connection stands in the protocol, and the states each command needs."""

from __future__ import annotations

import enum

__all__ = ["ClientState", "PUBLISH_STATES", "RESPOND_STATES"]


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
#: Where PUB, MPUB and DPUB may be sent.
PUBLISH_STATES = (ClientState.SUBSCRIBED, ClientState.READY, ClientState.SUBSCRIBING)
#: Where RDY, FIN, REQ and TOUCH may be sent.
RESPOND_STATES = (ClientState.SUBSCRIBED, ClientState.CLOSING, ClientState.SUBSCRIBING)
