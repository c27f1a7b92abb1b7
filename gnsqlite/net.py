"""Small network helpers below everyone: ``"host:port"`` addresses.

The client (:mod:`gnsqlite.connection`, the Consumer and Producer), the HTTP
client, the Spark connector, the CLI and the embedded broker all take
``"host:port"`` addresses and all write small frames that must not wait for
Nagle's algorithm; they share these helpers rather than each keeping a copy
(``TCP_NODELAY`` is :func:`gnsqlite.net.set_nodelay`). Pure: it imports no
I/O module, so the protocol core can use it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .errors import ConfigError

__all__ = [
    "connect_tcp",
    "format_address",
    "ip_family",
    "normalize_address",
    "normalize_addresses",
    "parse_address",
    "set_nodelay",
]


def parse_address(address: str | tuple[str, int]) -> tuple[str, int]:
    """``"host:port"`` or ``(host, port)`` as a ``(host, port)`` tuple.

    An IPv6 host may be bracketed (``"[::1]:4150"``); a scheme
    (``"http://host:4161"``) is refused. Raises
    :class:`~gnsqlite.errors.ConfigError` (a ``ValueError``) for a malformed
    string, ``TypeError`` for anything but a string or a pair.
    """
    if isinstance(address, tuple):
        host, port = address
        return str(host), int(port)
    if not isinstance(address, str):
        raise TypeError(f"an address is 'host:port' or (host, port), not {address!r}")
    if "://" in address:
        plain = address.partition("://")[2]
        raise ConfigError(f"an address is 'host:port' with no scheme ({plain!r}), not {address!r}")
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ConfigError(f"an address is 'host:port' (like 127.0.0.1:4150), not {address!r}")
    return host.strip("[]"), int(port_text)


def format_address(address: tuple[str, int]) -> str:
    """``(host, port)`` as ``"host:port"``."""
    return f"{address[0]}:{address[1]}"


def normalize_address(address: str | tuple[str, int]) -> str:
    """``address`` in the one form used as a key everywhere: ``"host:port"``.

    Raises ``ValueError`` or ``TypeError`` like :func:`parse_address`.
    """
    return format_address(parse_address(address))


def normalize_addresses(option: str, value: str | Iterable[str]) -> tuple[str, ...]:
    """One address or many as normalised ``"host:port"`` strings, duplicates dropped.

    ``option`` names the setting in the error:
    :class:`~gnsqlite.errors.ConfigError` for a malformed address.
    """
    items = [value] if isinstance(value, str) else list(value)
    out = []
    for item in items:
        try:
            out.append(normalize_address(item))
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{option}: {exc}") from None
    return tuple(dict.fromkeys(out))


def ip_family(host: str) -> int | None:
    """``AF_INET`` or ``AF_INET6`` when ``host`` is an IP address literal, else ``None``.

    A name (``"localhost"``), or an IPv6 address with a zone (``"fe80::1%eth0"``),
    gives ``None``: those need the resolver.
    """
    import socket

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
    import socket

    import gevent.socket

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
    import contextlib
    import socket

    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
