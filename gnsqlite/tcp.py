"""``TCP_NODELAY`` for every socket the library opens, client and broker alike.

All of them write small frames that must not wait for Nagle's algorithm.
Kept apart from :mod:`gnsqlite.net` (pure address helpers) because it
needs the ``socket`` module.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

__all__ = ["set_nodelay"]


def set_nodelay(sock: Any) -> None:
    """Disable Nagle's algorithm on a TCP socket, so small frames go out at once.

    A socket that cannot take the option (not TCP) is left as it is. Does not block.
    """
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
