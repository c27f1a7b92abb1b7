"""What pynsq code reads from a connection: ``id``, ``host``, ``port`` and counters.

``Reader.conns`` maps ids to these views, and ``Writer`` callbacks receive
one as ``conn``. Anything else is read from the gnsqlite
:class:`~gnsqlite.connection.Connection` behind it (``view.connection``).
"""

from __future__ import annotations

from typing import Any

from ..connection import Connection

__all__ = ["ConnectionView"]


class ConnectionView:
    """A pynsq-shaped view of one gnsqlite :class:`~gnsqlite.connection.Connection`.

    ``rdy``, ``last_rdy`` and ``in_flight`` are the Reader's counters when
    the view was made (0 for a Writer's connection).
    """

    def __init__(
        self, connection: Connection, rdy: int = 0, last_rdy: int = 0, in_flight: int = 0
    ) -> None:
        self.connection = connection
        self.id = connection.name
        self.host, self.port = connection.address
        self.rdy = rdy
        self.last_rdy = last_rdy
        self.in_flight = in_flight

    def __str__(self) -> str:
        return self.id

    def __repr__(self) -> str:
        return f"<nsq connection {self.id}>"

    def __getattr__(self, name: str) -> Any:
        return getattr(self.connection, name)

    @property
    def max_rdy_count(self) -> int:
        """The largest RDY nsqd accepts on this connection."""
        return self.connection.max_rdy_count

    def connected(self) -> bool:
        """Whether the connection is up (a method, as in pynsq)."""
        return self.connection.is_connected

    def closed(self) -> bool:
        """Whether the connection has ended (a method, as in pynsq)."""
        return self.connection.closed

    def close(self) -> None:
        """Close the connection (a Reader or Writer does not reconnect a closed one)."""
        self.connection.close()
