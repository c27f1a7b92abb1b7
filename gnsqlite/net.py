"""Small network helpers below everyone: ``"host:port"`` addresses.

The client (:mod:`gnsqlite.connection`, the Consumer and Producer), the HTTP
client, the Spark connector, the CLI and the embedded broker all take
``"host:port"`` addresses and all write small frames that must not wait for
Nagle's algorithm; they share these helpers rather than each keeping a copy
(``TCP_NODELAY`` is :func:`gnsqlite.tcp.set_nodelay`). Pure: it imports no
I/O module, so the protocol core can use it.
"""

from __future__ import annotations

from collections.abc import Iterable

from .errors import ConfigError

__all__ = [
    "format_address",
    "normalize_address",
    "normalize_addresses",
    "parse_address",
]


def parse_address(address: str | tuple[str, int]) -> tuple[str, int]:
    """``"host:port"`` or ``(host, port)`` as a ``(host, port)`` tuple.

    An IPv6 host may be bracketed (``"[::1]:4150"``). Raises
    :class:`~gnsqlite.errors.ConfigError` (a ``ValueError``) for a malformed
    string, ``TypeError`` for anything but a string or a pair.
    """
    if isinstance(address, tuple):
        host, port = address
        return str(host), int(port)
    if not isinstance(address, str):
        raise TypeError(f"an address is 'host:port' or (host, port), not {address!r}")
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
