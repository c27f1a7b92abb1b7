"""pynsq's connection keyword arguments, in pynsq's units, as gnsqlite options.

pynsq passes a Reader's or Writer's extra keywords to ``AsyncConn``; the
drop-in accepts the same names with the same units and builds a
:class:`~gnsqlite.config.ConnectionConfig` (seconds everywhere):

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
from collections.abc import Iterable, Mapping
from typing import Any

from ..config import ConnectionConfig

__all__ = ["CONNECTION_KEYWORDS", "TLS_OPTION_KEYS", "connection_config", "tls_context"]

#: The keywords pynsq's ``AsyncConn`` takes (besides host and port).
CONNECTION_KEYWORDS = (
    "timeout",
    "heartbeat_interval",
    "requeue_delay",
    "tls_v1",
    "tls_options",
    "snappy",
    "deflate",
    "deflate_level",
    "user_agent",
    "output_buffer_size",
    "output_buffer_timeout",
    "sample_rate",
    "auth_secret",
    "msg_timeout",
    "hostname",
)
#: The ``tls_options`` keys understood (those of ``ssl.wrap_socket``).
TLS_OPTION_KEYS = ("cert_reqs", "ca_certs", "certfile", "keyfile", "ssl_version", "ciphers")
_DIRECT = ("tls_v1", "snappy", "deflate", "deflate_level", "sample_rate", "auth_secret",
           "user_agent", "hostname")


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
    options: dict[str, Any] = {name: kwargs[name] for name in _DIRECT if name in kwargs}
    if "timeout" in kwargs:
        options["connect_timeout"] = kwargs["timeout"]
    if "heartbeat_interval" in kwargs:
        value = kwargs["heartbeat_interval"]
        options["heartbeat_interval"] = None if value is None or value == -1 else value
    if "output_buffer_size" in kwargs:
        value = kwargs["output_buffer_size"]
        if value == -1:
            options["output_buffer_size"] = None
        elif value != 0:
            options["output_buffer_size"] = value
    if "output_buffer_timeout" in kwargs:
        value = kwargs["output_buffer_timeout"]
        if value == -1:
            options["output_buffer_timeout"] = None
        elif value != 0:
            options["output_buffer_timeout"] = _milliseconds(value, "output_buffer_timeout")
    if kwargs.get("msg_timeout"):
        options["msg_timeout"] = kwargs["msg_timeout"]
    if kwargs.get("tls_options") is not None:
        options["tls_context"] = tls_context(kwargs["tls_options"])
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


def _milliseconds(value: Any, name: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value  # ConnectionConfig names the option and the type it wants
    return value / 1000.0
