"""pynsq's connection keyword arguments, in pynsq's units, as gnsqlite options.

pynsq passes a Reader's or Writer's extra keywords to ``AsyncConn``; the
drop-in accepts the same names with the same units and builds a
:class:`~gnsqlite.config.ConnectionConfig` (seconds everywhere). Each keyword
is the ``keyword`` of the ConnectionConfig option it sets (one declaration);
the conversions from pynsq's units are :data:`_PYNSQ_UNITS`:

==========================  ===============================================
``timeout``                 seconds -> ``connect_timeout``
``heartbeat_interval``      seconds (``-1`` or ``None``: off)
``requeue_delay``           seconds, times the attempts (a Reader option)
``output_buffer_size``      bytes; ``-1`` off, ``0`` nsqd's default
``output_buffer_timeout``   **milliseconds**; ``-1`` off, ``0`` nsqd's default
``msg_timeout``             seconds (``None``/``0``: nsqd's default)
``tls_options``             a dict of ``ssl.wrap_socket`` keywords
``tls_v1`` ``snappy`` ``deflate`` ``deflate_level`` ``sample_rate``
``auth_secret`` ``user_agent`` ``hostname``: as in pynsq
==========================  ===============================================

Ints and floats are both accepted; an unknown keyword raises ``TypeError``
naming it; a value out of range raises
:class:`~gnsqlite.errors.ConfigError` (a ``ValueError``).
"""

from __future__ import annotations

import difflib
import ssl
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..config import ConnectionConfig
from ..options import options_of

__all__ = ["CONNECTION_KEYWORDS", "TLS_OPTION_KEYS", "connection_config", "tls_context"]

#: pynsq keyword -> the ConnectionConfig option it sets (the ``keyword`` of its declaration).
_OPTION_OF = {o.keyword: o.name for o in options_of(ConnectionConfig) if o.keyword}
#: The keywords pynsq's ``AsyncConn`` takes (besides host and port); ``requeue_delay``
#: is the drop-in connection's own (pynsq's requeue policy), no ConnectionConfig option.
CONNECTION_KEYWORDS = (*_OPTION_OF, "requeue_delay")
#: The ``tls_options`` keys understood (those of ``ssl.wrap_socket``).
TLS_OPTION_KEYS = ("cert_reqs", "ca_certs", "certfile", "keyfile", "ssl_version", "ciphers")
#: A converted value meaning "leave the option at its default".
_DEFAULT = object()


def check_keywords(owner: str, given: Iterable[str], extra: Iterable[str] = ()) -> None:
    """Raise ``TypeError`` naming the first keyword pynsq's ``owner`` does not take."""
    known = set(CONNECTION_KEYWORDS) | set(extra)
    unknown = sorted(set(given) - known)
    if unknown:
        name = unknown[0]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}{hint}")


def connection_config(kwargs: Mapping[str, Any]) -> ConnectionConfig:
    """Build the connection options from pynsq keywords (``requeue_delay`` is ignored)."""
    options: dict[str, Any] = {}
    for keyword, name in _OPTION_OF.items():
        if keyword in kwargs:
            convert = _PYNSQ_UNITS.get(keyword)
            value = kwargs[keyword] if convert is None else convert(kwargs[keyword])
            if value is not _DEFAULT:
                options[name] = value
    return ConnectionConfig(**options)


def tls_context(tls_options: Mapping[str, Any]) -> ssl.SSLContext:
    """An ``SSLContext`` from pynsq's ``tls_options`` (``ssl.wrap_socket`` keywords).

    ``cert_reqs`` defaults to ``ssl.CERT_REQUIRED`` (as in pynsq), and then
    the certificate and the host name are checked; ``ca_certs`` replaces the
    system CAs; ``certfile``/``keyfile`` give a client certificate;
    ``ssl_version`` is ignored (the newest TLS both sides know is used).
    """
    if not isinstance(tls_options, Mapping):
        raise TypeError(f"tls_options must be a dict, not {type(tls_options).__name__}")
    unknown = sorted(set(tls_options) - set(TLS_OPTION_KEYS))
    if unknown:
        raise TypeError(
            f"tls_options: unknown key {unknown[0]!r}; use {', '.join(TLS_OPTION_KEYS)}"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if tls_options.get("cert_reqs", ssl.CERT_REQUIRED) == ssl.CERT_NONE:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif tls_options.get("ca_certs"):
        context.load_verify_locations(cafile=tls_options["ca_certs"])
    else:
        context.load_default_certs()
    if tls_options.get("certfile"):
        context.load_cert_chain(tls_options["certfile"], tls_options.get("keyfile"))
    if tls_options.get("ciphers"):
        context.set_ciphers(tls_options["ciphers"])
    return context


def _milliseconds(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value  # ConnectionConfig names the option and the type it wants
    return value / 1000.0


def _heartbeat(value: Any) -> Any:
    return None if value is None or value == -1 else value


def _output_buffer_size(value: Any) -> Any:
    return None if value == -1 else _DEFAULT if value == 0 else value


def _output_buffer_timeout(value: Any) -> Any:
    return None if value == -1 else _DEFAULT if value == 0 else _milliseconds(value)


#: pynsq keyword -> its value in ConnectionConfig's units (``_DEFAULT``: nsqd's default).
_PYNSQ_UNITS: dict[str, Callable[[Any], Any]] = {
    "heartbeat_interval": _heartbeat,
    "output_buffer_size": _output_buffer_size,
    "output_buffer_timeout": _output_buffer_timeout,
    "msg_timeout": lambda value: value if value else _DEFAULT,
    "tls_options": lambda value: _DEFAULT if value is None else tls_context(value),
}
