"""pynsq's ``nsq.snappy_socket``: the type of ``AsyncConn.socket`` on a snappy stream."""

from __future__ import annotations

from ._stream_view import CompressedSocketView

__all__ = ["SnappyEncoder", "SnappySocket"]


class SnappySocket(CompressedSocketView):
    """Snappy over a socket (a view: the Connection's codec compresses)."""

    kind = "snappy"


class SnappyEncoder(CompressedSocketView):
    """pynsq's snappy encoder (a view: the Connection's codec compresses)."""

    kind = "snappy"

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(None)

    encode = CompressedSocketView._refuse
