"""The bytes of ``PUB``, from a topic and a body already checked.

The producer's per-publish path: :func:`~gnsqlite.protocol.commands.pub`
checks its arguments and calls :func:`pub_bytes`; the producer, which has
checked them itself, calls it directly. Compiled in the compiled build (a
module of its own because :mod:`~gnsqlite.protocol.commands` is not: a
compiled function would raise ``TypeError`` where that module's checks
raise the documented errors).
"""

from __future__ import annotations

import struct
from typing import Final

__all__ = ["pub_bytes"]

_SIZE: Final = struct.Struct(">I")
#: ``PUB <topic>\n`` of the topics seen (bounded): a publisher names the same
#: topic on every call, and its line need not be formatted again.
_PUB_LINES: Final[dict[str, bytes]] = {}
_PUB_LINES_LIMIT: Final = 4096


def pub_bytes(topic: str, body: bytes) -> bytes:
    """``PUB <topic>`` with ``body`` size-prefixed; ``topic`` must be a valid name (not checked)."""
    line = _PUB_LINES.get(topic)
    if line is None:
        line = f"PUB {topic}\n".encode("ascii")
        if len(_PUB_LINES) < _PUB_LINES_LIMIT:
            _PUB_LINES[topic] = line
    return b"".join((line, _SIZE.pack(len(body)), body))
