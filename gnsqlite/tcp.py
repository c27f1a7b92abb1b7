"""Opening TCP connections, and ``TCP_NODELAY`` for every socket the library opens.

All of them write small frames that must not wait for Nagle's algorithm.
:func:`connect_tcp` opens a connection to an IP address without a name
lookup: gevent's default resolver runs ``getaddrinfo`` in a thread pool,
which it starts (a native thread, ``concurrent.futures`` imported) the first
time any lookup is made, even for ``"127.0.0.1"``; a process that only ever
connects to addresses need not pay for that. Kept apart from
:mod:`gnsqlite.net` (pure address helpers) because it needs the ``socket``
module.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

import gevent.socket

__all__ = ["connect_tcp", "ip_family", "set_nodelay"]


def ip_family(host: str) -> int | None:
    """``AF_INET`` or ``AF_INET6`` when ``host`` is an IP address literal, else ``None``.

    A name (``"localhost"``), or an IPv6 address with a zone (``"fe80::1%eth0"``),
    gives ``None``: those need the resolver.
    """
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except (OSError, ValueError):
            continue
        return family
    return None


def connect_tcp(address: tuple[str, int], timeout: float | None = None) -> Any:
    """A connected gevent TCP socket to ``(host, port)``, with ``TCP_NODELAY`` set.

    Blocks the calling greenlet until connected; ``timeout`` (seconds, ``None``:
    no limit) bounds the connect and stays the socket's timeout, as with
    ``gevent.socket.create_connection``, which serves a host name. An IP
    address is connected to directly, with no name lookup (see the module
    docstring). Raises ``OSError`` (``ConnectionRefusedError``,
    ``TimeoutError`` ...) as ``create_connection`` does.
    """
    host, port = address
    family = ip_family(host)
    if family is None:
        sock = gevent.socket.create_connection((host, port), timeout)
    else:
        sock = gevent.socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect((host, port))
        except BaseException:
            sock.close()
            raise
    set_nodelay(sock)
    return sock


def set_nodelay(sock: Any) -> None:
    """Disable Nagle's algorithm on a TCP socket, so small frames go out at once.

    A socket that cannot take the option (not TCP) is left as it is. Does not block.
    """
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
