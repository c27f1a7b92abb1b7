"""pynsq's ``nsq.deflate_socket``: the type of ``AsyncConn.socket`` on a deflate stream."""

from __future__ import annotations

from ._stream_view import CompressedSocketView

__all__ = ["DeflateEncoder", "DeflateSocket"]


class DeflateSocket(CompressedSocketView):
    """Deflate over a socket (a view: the Connection's codec compresses)."""

    kind = "deflate"


class DeflateEncoder(CompressedSocketView):
    """pynsq's deflate encoder (a view: the Connection's codec compresses)."""

    kind = "deflate"

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(None)

    encode = CompressedSocketView._refuse
