"""Finding the nsqd that carry a topic by asking every nsqlookupd.

Each lookupd answers for the nsqd registered with it; lookupds do not share
what they know, so the answers are united, keyed by
``broadcast_address:tcp_port`` as the client-library guide asks. A lookupd
that fails is logged and skipped; the poll fails only when all of them do.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from .errors import NoConnectionsError
from .http import LookupdClient

__all__ = ["LookupdPoller"]

log = logging.getLogger(__name__)


class LookupdPoller:
    """Polls ``lookupd_http_addresses`` (``"host:port"``) for ``topic``.

    ``request_timeout`` bounds each HTTP request, in seconds.
    """

    def __init__(
        self, topic: str, lookupd_http_addresses: Iterable[str], request_timeout: float = 2.0
    ) -> None:
        self.topic = topic
        self.clients = [LookupdClient(a, timeout=request_timeout) for a in lookupd_http_addresses]

    def poll(self) -> set[str]:
        """The union of nsqd ``"host:port"`` addresses; blocks the calling greenlet.

        Raises :class:`~gnsqlite.errors.NoConnectionsError` only when every
        lookupd failed.
        """
        found: set[str] = set()
        errors: dict[str, BaseException] = {}
        for client in self.clients:
            try:
                found.update(client.producer_addresses(self.topic))
            except Exception as exc:  # any failure, a malformed answer too, skips this lookupd
                errors[client.address] = exc
                log.warning("lookupd %s failed for topic %r: %s", client.address, self.topic, exc)
        if errors and len(errors) == len(self.clients):
            raise NoConnectionsError(errors, "every lookupd failed")
        return found
