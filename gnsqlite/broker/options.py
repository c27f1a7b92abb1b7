"""The embedded broker's options, named after nsqd's flags, in Python units.

Durations are float seconds, sizes bytes. :class:`BrokerOptions` declares
each option once with the client's mechanism (:func:`gnsqlite.options.option`:
its default from :mod:`gnsqlite.protocol.defaults`, range, flag and help),
validates every value when it is built and raises
:class:`~gnsqlite.errors.ConfigError` naming the option.
:func:`parse_duration` reads Go duration strings (``"60s"``, ``"1m0s"``,
``"500ms"``, ``"2h"``) as nsqd's flags accept them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import ConfigError
from ..options import Validated, option
from ..protocol import defaults

__all__ = [
    "AuthPolicy",
    "BrokerOptions",
    "format_duration",
    "parse_bool",
    "parse_duration",
    "parse_tls_required",
]

#: ``auth_policy(remote_ip, tls, secret)`` returns what an nsqd auth server
#: would answer (``{"ttl": s, "identity": ..., "authorizations": [...]}``), or
#: ``None`` to refuse (like an auth server answering 403). It may block.
AuthPolicy = Callable[[str, bool, str], "Mapping[str, Any] | None"]

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """A Go duration string (``"1m30s"``, ``"500ms"``, ``"0"``) as float seconds."""
    s = text.strip()
    sign = 1.0
    if s[:1] in "+-" and s:
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    total = 0.0
    pos = 0
    while pos < len(s):
        match = _PART.match(s, pos)
        if match is None:
            raise ValueError(f"invalid duration {text!r}: use e.g. 60s, 1m0s, 500ms, 2h")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return sign * total


def format_duration(seconds: float) -> str:
    """Float seconds as a short Go-style duration (``"1h"``, ``"5m"``, ``"45s"``, ``"250ms"``)."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s" if seconds >= 1 else f"{seconds * 1000:g}ms"


def parse_bool(text: str) -> bool:
    """A boolean flag's value as nsqd reads it (Go's ``ParseBool``, and ``yes``/``on``)."""
    value = text.strip().lower()
    if value in ("1", "t", "true", "yes", "on"):
        return True
    if value in ("0", "f", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def parse_tls_required(text: str) -> bool | str:
    """nsqd's ``--tls-required``: a boolean, or ``tcp-https`` (TLS on TCP only)."""
    return "tcp-https" if text.strip().lower() == "tcp-https" else parse_bool(text)


def _address(value: str) -> bool:
    _, sep, port = value.rpartition(":")
    return bool(sep) and port.isdigit() and 0 <= int(port) <= 65535


@dataclass(frozen=True, kw_only=True)
class BrokerOptions(Validated):
    """Every option of :class:`~gnsqlite.broker.Broker`: nsqd's flag names and defaults.

    Each is declared once, with the flag it is read from
    (``python -m gnsqlite.broker --msg-timeout=1m``) and its help text; the
    command line is built from these declarations.
    """

    tcp_address: str = option(
        "127.0.0.1:4150",
        str,
        flag="tcp-address",
        metavar="ADDR",
        doc="address to listen on for TCP clients (port 0: a free one)",
    )
    http_address: str = option(
        "127.0.0.1:4151",
        str,
        flag="http-address",
        metavar="ADDR",
        doc="address to listen on for HTTP clients (port 0: a free one)",
    )
    broadcast_address: str | None = option(
        None,
        str,
        nullable=True,
        flag="broadcast-address",
        metavar="HOST",
        doc="address registered with lookupd (default: the listening host)",
    )
    lookupd_tcp_addresses: Sequence[str] = option(
        (),
        (tuple, list),
        flag="lookupd-tcp-address",
        metavar="ADDR",
        doc="nsqlookupd TCP address to register with (repeatable)",
    )
    data_path: str | None = option(
        None,
        str,
        nullable=True,
        flag="data-path",
        metavar="PATH",
        doc="directory to persist messages to at stop (default: none, nothing kept)",
    )
    msg_timeout: float = option(
        defaults.MSG_TIMEOUT,
        float,
        above=0,
        unit="s",
        flag="msg-timeout",
        doc="default time before an unanswered message is requeued",
    )
    max_msg_timeout: float = option(
        defaults.MAX_MSG_TIMEOUT,
        float,
        above=0,
        unit="s",
        flag="max-msg-timeout",
        doc="longest message timeout a client can ask for",
    )
    max_msg_size: int = option(
        defaults.MAX_MSG_SIZE,
        int,
        lo=1,
        unit="bytes",
        flag="max-msg-size",
        doc="largest message body accepted",
    )
    max_body_size: int = option(
        defaults.MAX_BODY_SIZE,
        int,
        lo=1,
        unit="bytes",
        flag="max-body-size",
        doc="largest command body accepted (an MPUB's whole batch)",
    )
    max_rdy_count: int = option(
        defaults.MAX_RDY_COUNT,
        int,
        lo=1,
        flag="max-rdy-count",
        metavar="N",
        doc="largest RDY count a client may send",
    )
    #: consumers allowed per channel; 0 = no limit (nsqd's ``--max-channel-consumers``)
    max_channel_consumers: int = option(
        0,
        int,
        lo=0,
        flag="max-channel-consumers",
        metavar="N",
        doc="consumer connections allowed per channel (0: no limit)",
    )
    #: open TCP connections allowed; 0 = no limit. nsqd v1.3.0 has no such flag
    #: (it accepts until the process runs out of file descriptors); over the
    #: limit a new connection is closed at once, before a byte is read.
    max_connections: int = option(
        0,
        int,
        lo=0,
        flag="max-connections",
        metavar="N",
        doc="TCP connections allowed (0: no limit; not an nsqd flag)",
    )
    max_heartbeat_interval: float = option(
        defaults.MAX_HEARTBEAT_INTERVAL,
        float,
        above=0,
        unit="s",
        flag="max-heartbeat-interval",
        doc="longest heartbeat interval a client can ask for",
    )
    max_req_timeout: float = option(
        defaults.MAX_REQ_TIMEOUT,
        float,
        lo=0,
        unit="s",
        flag="max-req-timeout",
        doc="longest requeue delay accepted",
    )
    #: nsqd's ``ClientTimeout`` (no flag): clients that IDENTIFY no heartbeat
    #: interval get half of it, and must send a command within twice that.
    client_timeout: float = option(defaults.CLIENT_TIMEOUT, float, above=0, unit="s")
    max_output_buffer_size: int = option(
        defaults.MAX_OUTPUT_BUFFER_SIZE,
        int,
        lo=1,
        unit="bytes",
        flag="max-output-buffer-size",
        doc="largest output buffer a client can ask for",
    )
    output_buffer_timeout: float = option(
        defaults.OUTPUT_BUFFER_TIMEOUT,
        float,
        above=0,
        unit="s",
        flag="output-buffer-timeout",
        doc="default time between flushes to a client",
    )
    max_output_buffer_timeout: float = option(
        defaults.MAX_OUTPUT_BUFFER_TIMEOUT,
        float,
        above=0,
        unit="s",
        flag="max-output-buffer-timeout",
        doc="longest flush interval a client can ask for",
    )
    min_output_buffer_timeout: float = option(
        defaults.MIN_OUTPUT_BUFFER_TIMEOUT,
        float,
        unit="s",
        flag="min-output-buffer-timeout",
        doc="shortest flush interval a client can ask for",
    )
    snappy: bool = option(True, bool, flag="snappy", doc="offer snappy compression to clients")
    deflate: bool = option(True, bool, flag="deflate", doc="offer deflate compression to clients")
    max_deflate_level: int = option(
        defaults.MAX_DEFLATE_LEVEL,
        int,
        lo=1,
        hi=9,
        flag="max-deflate-level",
        metavar="N",
        doc="highest deflate level a client can ask for (1-9)",
    )
    #: HTTPS listener (nsqd's ``--https-address``), serving the HTTP API over TLS
    #: with the TCP upgrade's certificate and policy; only with ``tls_cert``. nsqd
    #: listens on 0.0.0.0:4152 unless told otherwise; the embedded broker only
    #: when this is given (tests run many brokers at once).
    https_address: str | None = option(
        None,
        str,
        nullable=True,
        flag="https-address",
        metavar="ADDR",
        doc="address to serve the HTTP API over TLS on (needs --tls-cert)",
    )
    tls_cert: str | None = option(
        None,
        str,
        nullable=True,
        flag="tls-cert",
        metavar="PATH",
        doc="PEM certificate file (TLS upgrades, --https-address)",
    )
    tls_key: str | None = option(
        None, str, nullable=True, flag="tls-key", metavar="PATH", doc="PEM key file of --tls-cert"
    )
    #: PEM file of the CAs that sign client certificates (``require-verify``).
    tls_root_ca_file: str | None = option(
        None,
        str,
        nullable=True,
        flag="tls-root-ca-file",
        metavar="PATH",
        doc="PEM file of the CAs that sign client certificates",
    )
    #: nsqd's ``--tls-required``: ``True`` makes TCP clients upgrade to TLS
    #: before any other command and answers plain HTTP with 403
    #: ``TLS_REQUIRED``; ``"tcp-https"`` requires TLS on TCP only (plain HTTP
    #: still served); ``False`` requires it nowhere.
    tls_required: bool | str = option(
        False,
        (bool, str),
        flag="tls-required",
        metavar="BOOL",
        parse=parse_tls_required,
        doc="require TLS of clients: true, false or tcp-https (TCP only)",
    )
    #: nsqd's ``--tls-client-auth-policy``: ``None`` asks clients for no certificate
    #: (even with ``tls_root_ca_file``); ``"require"`` demands one from any CA,
    #: unverified; ``"require-verify"`` demands one signed by ``tls_root_ca_file``
    #: (by the system's CAs without it). Setting one makes ``tls_required`` true,
    #: as nsqd does.
    tls_client_auth_policy: str | None = option(
        None,
        str,
        nullable=True,
        flag="tls-client-auth-policy",
        metavar="POLICY",
        doc="ask clients for a certificate: require, require-verify",
    )
    #: nsqd's ``--tls-min-version``: the oldest protocol accepted, ``"tls1.0"``
    #: (nsqd's default), ``"tls1.1"``, ``"tls1.2"`` or ``"tls1.3"``.
    tls_min_version: str = option(
        "tls1.0",
        object,
        flag="tls-min-version",
        metavar="VERSION",
        doc="oldest TLS accepted: tls1.0, tls1.1, tls1.2 or tls1.3",
    )
    auth_http_addresses: Sequence[str] = option(
        (),
        (tuple, list),
        flag="auth-http-address",
        metavar="ADDR",
        doc="auth server host:port or URL to ask (repeatable)",
    )
    #: what decides AUTH in-process instead of an auth server (see :data:`AuthPolicy`)
    auth_policy: AuthPolicy | None = option(None, object, nullable=True, compare=False)
    http_client_timeout: float = option(
        defaults.HTTP_CLIENT_REQUEST_TIMEOUT,
        float,
        above=0,
        unit="s",
        flag="http-client-request-timeout",
        doc="timeout of a request to lookupd or auth",
    )
    #: the longest an auth server or lookupd HTTP connect may take (nsqd's
    #: ``--http-client-connect-timeout``); ``http_client_timeout`` bounds the rest.
    http_client_connect_timeout: float = option(
        defaults.HTTP_CLIENT_CONNECT_TIMEOUT,
        float,
        above=0,
        unit="s",
        flag="http-client-connect-timeout",
        doc="timeout of a connect to lookupd or auth",
    )
    #: how often in-flight and deferred messages are checked for their deadline
    queue_scan_interval: float = option(0.1, float, above=0, unit="s")

    _ORDERED: ClassVar[tuple[tuple[str, str], ...]] = (
        ("msg_timeout", "max_msg_timeout"),
        ("max_msg_size", "max_body_size"),
    )

    def _check_rules(self) -> None:
        object.__setattr__(self, "lookupd_tcp_addresses", tuple(self.lookupd_tcp_addresses))
        object.__setattr__(self, "auth_http_addresses", tuple(self.auth_http_addresses))
        for name in ("tcp_address", "http_address"):
            if not _address(getattr(self, name)):
                raise ConfigError(f"{name}={getattr(self, name)!r} is not a 'host:port' address")
        if self.https_address is not None and not _address(self.https_address):
            raise ConfigError(f"https_address={self.https_address!r} is not a 'host:port' address")
        for value in self.auth_http_addresses:
            if value.lower().startswith("https://"):
                # nsqd would query it over TLS; this broker's auth client speaks plain HTTP
                raise ConfigError(
                    f"auth_http_addresses holds {value!r}: the embedded broker queries auth"
                    " servers over plain HTTP only; give 'host:port' or 'http://host:port'"
                )
        for name in ("lookupd_tcp_addresses", "auth_http_addresses"):
            for value in getattr(self, name):
                plain = value.split("://", 1)[-1]
                if not _address(plain):
                    raise ConfigError(f"{name} holds {value!r}, not a 'host:port' address")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("tls_cert and tls_key must be given together")
        self._check_tls()

    def _check_tls(self) -> None:
        required = self.tls_required
        if isinstance(required, str):
            required = required.strip().lower()
        if required not in (True, False, "tcp-https"):
            raise ConfigError(
                f"tls_required={self.tls_required!r} must be True (TCP and HTTP), "
                "'tcp-https' (TCP only) or False"
            )
        object.__setattr__(self, "tls_required", required)
        policy = self.tls_client_auth_policy
        if policy == "":  # nsqd's unset value
            object.__setattr__(self, "tls_client_auth_policy", None)
        elif policy is not None:
            if policy not in ("require", "require-verify"):
                # nsqd would take a typo as "no certificate" and still require TLS
                raise ConfigError(
                    f"tls_client_auth_policy={policy!r} must be 'require' (a client "
                    "certificate from any CA) or 'require-verify' (one signed by "
                    "tls_root_ca_file), or None to ask for no certificate"
                )
            if self.tls_cert is None:
                raise ConfigError(
                    f"tls_client_auth_policy={policy!r} needs tls_cert and tls_key "
                    "(it makes TLS required)"
                )
            if not self.tls_required:  # as nsqd does; "tcp-https" is kept
                object.__setattr__(self, "tls_required", True)
        version = self.tls_min_version
        if not isinstance(version, str):
            raise ConfigError(f"tls_min_version={version!r} must be a string such as 'tls1.2'")
        version = version.strip().lower() or "tls1.0"
        if version not in ("tls1.0", "tls1.1", "tls1.2", "tls1.3"):
            hint = " (nsqd v1.3.0 refuses SSL 3.0 too)" if version.startswith("ssl") else ""
            raise ConfigError(
                f"tls_min_version={self.tls_min_version!r} must be 'tls1.0', 'tls1.1', "
                f"'tls1.2' or 'tls1.3'{hint}"
            )
        object.__setattr__(self, "tls_min_version", version)
        if self.tls_required and self.tls_cert is None:
            raise ConfigError("tls_required needs tls_cert and tls_key")

    @property
    def auth_enabled(self) -> bool:
        """``True`` when clients must AUTH (an auth server or policy is set)."""
        return bool(self.auth_http_addresses) or self.auth_policy is not None
