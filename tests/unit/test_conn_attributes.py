"""A Connection's attribute count: CPython keeps at most 29 inline (and specializes reads on them).

With a 30th instance attribute CPython 3.11 moves them all into a dict, and
every ``self.closed``, ``conn.finish`` ... on the per-message paths (FIN,
RDY, the reader) becomes a dict lookup instead of a specialized read.
"""

from __future__ import annotations

import dis
import sys

import pytest

from gnsqlite.connection import Connection

pytestmark = pytest.mark.no_server

#: CPython 3.11's limit of attributes kept inline (SHARED_KEYS_MAX_SIZE is 30,
#: and an instance with 30 already has a dict of its own).
INLINE_LIMIT = 29


def test_a_new_connection_has_at_most_29_instance_attributes() -> None:
    assert len(vars(Connection("127.0.0.1:4150"))) <= INLINE_LIMIT


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="CPython 3.11's specializer")
def test_reads_of_a_connections_attributes_are_specialized() -> None:
    conn = Connection("127.0.0.1:4150")

    def read(c: Connection) -> bool:
        return c.closed

    for _ in range(64):  # enough for the interpreter to specialize the read
        read(conn)
    names = [i.opname for i in dis.get_instructions(read, adaptive=True)]  # type: ignore[call-arg]
    assert "LOAD_ATTR_INSTANCE_VALUE" in names, names
