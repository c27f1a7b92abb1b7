"""What ``AsyncConn.socket`` is on a compressed connection: the compressor over the socket.

pynsq wraps its socket in a ``SnappySocket`` or ``DeflateSocket`` once the
stream is compressed, and code (pynsq's tests among it) checks the wrapper's
type and its ``_socket``. Here the gnsqlite Connection's codec compresses
the stream, so these are views that say which compression runs over which
socket; reading or writing through one would bypass the codec, so it raises.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CompressedSocketView"]


class CompressedSocketView:
    """The ``kind`` of compression (``"snappy"``, ``"deflate"``) over ``socket``."""

    kind = ""

    def __init__(self, socket: Any, *args: Any, **kwargs: Any) -> None:
        self._socket = socket

    def __repr__(self) -> str:
        return f"<{type(self).__name__} over {self._socket!r}>"

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"{type(self).__name__} only describes the connection: the gnsqlite Connection's"
            f" {self.kind} codec owns the stream; send with AsyncConn.send()"
            " (docs/migrating-pynsq.md)"
        )

    recv = read = recv_into = send = sendall = bootstrap = _refuse
