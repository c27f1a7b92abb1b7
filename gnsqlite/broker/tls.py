"""The embedded broker's server-side TLS context, with nsqd v1.3.0's policy.

nsqd builds one ``tls.Config`` from ``--tls-cert``/``--tls-key``,
``--tls-client-auth-policy``, ``--tls-root-ca-file`` and ``--tls-min-version``
and uses it for the TCP upgrade and the HTTPS listener. :func:`server_context`
builds the same policy as an ``ssl.SSLContext``:

* no policy: no client certificate is asked for (a certificate the client
  holds is never sent, so none is checked); the root CA file is still read,
  and a bad one stops the start, as in nsqd;
* ``require``: a certificate is required but not verified (any CA, even a
  self-signed one);
* ``require-verify``: a certificate signed by the root CA file is required
  (by the system's CAs when no root CA file is given, like Go's nil pool);
* with a policy and a root CA file, the certificate request names that
  file's CAs (Go's ``ClientCAs``): a Go client sends only a certificate one
  of them signed, so under ``require`` one from another CA is never sent and
  the handshake fails, as with nsqd (:func:`_name_client_cas`);
* the protocol floor is ``--tls-min-version`` (``tls1.0`` by default, as in
  nsqd); no ceiling, so TLS 1.3 is offered as nsqd does.

Python's ``ssl`` module cannot accept an unverified client certificate
(``require``): OpenSSL needs a verify callback for that, which only C code can
set. :func:`_accept_any_certificate` sets one through ``ctypes`` on CPython,
after checking it reached the right ``SSL_CTX``; where that is not possible
the broker refuses to start with ``require`` rather than verify silently.
"""

from __future__ import annotations

import ctypes
import os
import ssl
import sys
import warnings
from typing import Any

import gevent.ssl

from ..errors import ConfigError
from .options import BrokerOptions

__all__ = ["CLIENT_AUTH_POLICIES", "TLS_MIN_VERSIONS", "server_context"]

#: ``--tls-client-auth-policy`` values nsqd acts on.
CLIENT_AUTH_POLICIES = ("require", "require-verify")

#: ``--tls-min-version`` values nsqd v1.3.0 accepts (case-insensitive); it
#: refuses ``ssl3.0`` although its help text still lists it.
TLS_MIN_VERSIONS = {
    "tls1.0": ssl.TLSVersion.TLSv1,
    "tls1.1": ssl.TLSVersion.TLSv1_1,
    "tls1.2": ssl.TLSVersion.TLSv1_2,
    "tls1.3": ssl.TLSVersion.TLSv1_3,
}

# Python's default server cipher list less its "!SHA1": TLS 1.0 and 1.1 have only
# SHA-1 suites, and OpenSSL 3 allows those protocols only at security level 0. Used
# only when the floor is below TLS 1.2; the order still prefers AEAD suites.
_OLD_PROTOCOL_CIPHERS = (
    "@SECLEVEL=0:ECDH+AESGCM:ECDH+CHACHA20:ECDH+AES:DHE+AES:!aNULL:!eNULL:!aDSS:!AESCCM"
)

# OpenSSL's SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT
_VERIFY_PEER = 0x01
_VERIFY_REQUIRE_CERT = 0x03
_VERIFY_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)


def _accept_all(preverify_ok: int, store: int | None) -> int:
    return 1


#: Kept alive for as long as any context points at it (the module's lifetime).
_ACCEPT_ALL = _VERIFY_CALLBACK(_accept_all)


def server_context(options: BrokerOptions) -> ssl.SSLContext:
    """A cooperative server context for ``options`` (which must have ``tls_cert``).

    Raises ``OSError``/``ssl.SSLError`` for unreadable or bad PEM files and
    :class:`~gnsqlite.errors.ConfigError` for a policy this Python cannot apply.
    """
    context = gevent.ssl.SSLContext(gevent.ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(options.tls_cert), options.tls_key)
    floor = TLS_MIN_VERSIONS[options.tls_min_version]
    with warnings.catch_warnings():  # ssl warns that TLS 1.0/1.1 are deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = floor
    if floor < ssl.TLSVersion.TLSv1_2:
        context.set_ciphers(_OLD_PROTOCOL_CIPHERS)
    if options.tls_root_ca_file is not None:
        context.load_verify_locations(options.tls_root_ca_file)
    policy = options.tls_client_auth_policy
    if policy is not None and options.tls_root_ca_file is not None:
        _name_client_cas(context, options.tls_root_ca_file)
    if policy == "require-verify":
        if options.tls_root_ca_file is None:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        context.verify_mode = ssl.CERT_REQUIRED
    elif policy == "require":
        _accept_any_certificate(context)
    else:
        context.verify_mode = ssl.CERT_NONE
    return context


#: CPython versions whose ``PySSLContext`` starts with the ``SSL_CTX *`` (read from
#: Modules/_ssl.c of each); on others the pointer is not read at all, since a
#: wrong guess would crash in OpenSSL rather than raise.
_KNOWN_LAYOUT = ((3, 10), (3, 11), (3, 12), (3, 13))


def _ssl_ctx_pointer(context: ssl.SSLContext) -> int | None:
    """The ``SSL_CTX *`` of ``context`` (CPython: the first field after the header)."""
    if sys.implementation.name != "cpython" or sys.version_info[:2] not in _KNOWN_LAYOUT:
        return None
    pointer = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
    return int(pointer) if pointer else None


def _libssl() -> Any:
    import _ssl  # the extension module; its OpenSSL is the one behind ``context``

    return ctypes.CDLL(_ssl.__file__)


def _checked_ssl_ctx(context: ssl.SSLContext, what: str) -> tuple[Any, int]:
    """libssl and the ``SSL_CTX *`` of ``context``, proven to be that context's.

    Raises :class:`~gnsqlite.errors.ConfigError` naming ``what`` where they
    cannot be had. Leaves ``context.verify_mode`` at ``CERT_REQUIRED``.
    """
    problem = f"{what} needs CPython 3.10 to 3.13 with its ssl module linked to a shared OpenSSL"
    try:
        lib = _libssl()
        get_verify_mode = lib.SSL_CTX_get_verify_mode
    except (ImportError, OSError, AttributeError) as exc:
        raise ConfigError(f"{problem} ({exc})") from None
    get_verify_mode.argtypes = [ctypes.c_void_p]
    get_verify_mode.restype = ctypes.c_int
    # Prove the pointer is this context's SSL_CTX before writing through it: two
    # different modes set from Python must read back through it.
    pointer = _ssl_ctx_pointer(context)
    checked = False
    if pointer is not None:
        context.verify_mode = ssl.CERT_OPTIONAL
        optional = get_verify_mode(pointer)
        context.verify_mode = ssl.CERT_REQUIRED
        required = get_verify_mode(pointer)
        checked = optional == _VERIFY_PEER and required == _VERIFY_REQUIRE_CERT
    if pointer is None or not checked:
        raise ConfigError(problem)
    return lib, pointer


def _accept_any_certificate(context: ssl.SSLContext) -> None:
    """Require a client certificate and accept it unverified (Go's RequireAnyClientCert)."""
    try:
        lib, pointer = _checked_ssl_ctx(context, "tls_client_auth_policy='require'")
        set_verify = lib.SSL_CTX_set_verify
    except (ConfigError, AttributeError) as exc:
        raise ConfigError(f"{exc}; use 'require-verify' with tls_root_ca_file instead") from None
    set_verify.argtypes = [ctypes.c_void_p, ctypes.c_int, _VERIFY_CALLBACK]
    set_verify.restype = None
    set_verify(pointer, _VERIFY_REQUIRE_CERT, _ACCEPT_ALL)


def _name_client_cas(context: ssl.SSLContext, ca_file: str) -> bool:
    """Name ``ca_file``'s CAs in the certificate request, as Go's ``ClientCAs`` does.

    A client holding several certificates (go-nsq, Go's ``crypto/tls``) sends
    only one signed by a CA named there, and none when no CA it knows is
    named: so under ``require`` nsqd refuses a certificate from another CA at
    the handshake. Python's ``ssl`` has no call for this; returns ``False``
    (the list left empty: clients then send any certificate they hold) where
    ``ctypes`` cannot reach the context.
    """
    try:
        lib, pointer = _checked_ssl_ctx(context, "naming the client CAs")
        load = lib.SSL_load_client_CA_file
        set_list = lib.SSL_CTX_set_client_CA_list
    except (ConfigError, AttributeError):
        return False
    load.argtypes = [ctypes.c_char_p]
    load.restype = ctypes.c_void_p
    set_list.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    set_list.restype = None
    names = load(os.fsencode(ca_file))
    if not names:  # no certificate in it: nsqd would have refused the file already
        return False
    set_list(pointer, names)  # the SSL_CTX owns the list from now on
    return True
