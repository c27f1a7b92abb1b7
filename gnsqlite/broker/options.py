"""The embedded broker's options, named after nsqd's flags, in Python units.

Durations are float seconds, sizes bytes. :class:`BrokerOptions` validates
every value when it is built and raises :class:`~gnsqlite.errors.ConfigError`
naming the option. :func:`parse_duration` reads Go duration strings
(``"60s"``, ``"1m0s"``, ``"500ms"``, ``"2h"``) as nsqd's flags accept them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import ConfigError
from ..protocol import defaults

__all__ = ["AuthPolicy", "BrokerOptions", "parse_duration"]

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


def _address(value: str) -> bool:
    _, sep, port = value.rpartition(":")
    return bool(sep) and port.isdigit() and 0 <= int(port) <= 65535


@dataclass(frozen=True)
class BrokerOptions:
    """Every option of :class:`~gnsqlite.broker.Broker` (nsqd's flag names)."""

    tcp_address: str = "127.0.0.1:4150"
    http_address: str = "127.0.0.1:4151"
    broadcast_address: str | None = None
    lookupd_tcp_addresses: Sequence[str] = ()
    data_path: str | None = None
    msg_timeout: float = defaults.MSG_TIMEOUT
    max_msg_timeout: float = defaults.MAX_MSG_TIMEOUT
    max_msg_size: int = defaults.MAX_MSG_SIZE
    max_body_size: int = defaults.MAX_BODY_SIZE
    max_rdy_count: int = defaults.MAX_RDY_COUNT
    #: consumers allowed per channel; 0 = no limit (nsqd's ``--max-channel-consumers``)
    max_channel_consumers: int = 0
    #: open TCP connections allowed; 0 = no limit. nsqd v1.3.0 has no such flag
    #: (it accepts until the process runs out of file descriptors); over the
    #: limit a new connection is closed at once, before a byte is read.
    max_connections: int = 0
    max_heartbeat_interval: float = defaults.MAX_HEARTBEAT_INTERVAL
    max_req_timeout: float = defaults.MAX_REQ_TIMEOUT
    client_timeout: float = defaults.CLIENT_TIMEOUT
    max_output_buffer_size: int = defaults.MAX_OUTPUT_BUFFER_SIZE
    output_buffer_timeout: float = defaults.OUTPUT_BUFFER_TIMEOUT
    max_output_buffer_timeout: float = defaults.MAX_OUTPUT_BUFFER_TIMEOUT
    min_output_buffer_timeout: float = defaults.MIN_OUTPUT_BUFFER_TIMEOUT
    snappy: bool = True
    deflate: bool = True
    max_deflate_level: int = defaults.MAX_DEFLATE_LEVEL
    #: HTTPS listener (nsqd's ``--https-address``), serving the HTTP API over TLS
    #: with the TCP upgrade's certificate and policy; only with ``tls_cert``. nsqd
    #: listens on 0.0.0.0:4152 unless told otherwise; the embedded broker only
    #: when this is given (tests run many brokers at once).
    https_address: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    #: PEM file of the CAs that sign client certificates (``require-verify``).
    tls_root_ca_file: str | None = None
    #: nsqd's ``--tls-required``: ``True`` makes TCP clients upgrade to TLS
    #: before any other command and answers plain HTTP with 403
    #: ``TLS_REQUIRED``; ``"tcp-https"`` requires TLS on TCP only (plain HTTP
    #: still served); ``False`` requires it nowhere.
    tls_required: bool | str = False
    #: nsqd's ``--tls-client-auth-policy``: ``None`` asks clients for no certificate
    #: (even with ``tls_root_ca_file``); ``"require"`` demands one from any CA,
    #: unverified; ``"require-verify"`` demands one signed by ``tls_root_ca_file``
    #: (by the system's CAs without it). Setting one makes ``tls_required`` true,
    #: as nsqd does.
    tls_client_auth_policy: str | None = None
    #: nsqd's ``--tls-min-version``: the oldest protocol accepted, ``"tls1.0"``
    #: (nsqd's default), ``"tls1.1"``, ``"tls1.2"`` or ``"tls1.3"``.
    tls_min_version: str = "tls1.0"
    auth_http_addresses: Sequence[str] = ()
    auth_policy: AuthPolicy | None = field(default=None, compare=False)
    http_client_timeout: float = defaults.HTTP_CLIENT_REQUEST_TIMEOUT
    #: the longest an auth server or lookupd HTTP connect may take (nsqd's
    #: ``--http-client-connect-timeout``); ``http_client_timeout`` bounds the rest.
    http_client_connect_timeout: float = defaults.HTTP_CLIENT_CONNECT_TIMEOUT
    queue_scan_interval: float = 0.1

    def __post_init__(self) -> None:
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
        positive = (
            "msg_timeout",
            "max_msg_timeout",
            "max_heartbeat_interval",
            "client_timeout",
            "queue_scan_interval",
            "http_client_timeout",
            "http_client_connect_timeout",
            "max_output_buffer_timeout",
            "output_buffer_timeout",
        )
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{name}={value!r} must be a number of seconds above 0")
        if self.max_req_timeout < 0:
            raise ConfigError(f"max_req_timeout={self.max_req_timeout!r} must be 0 or more")
        if self.msg_timeout > self.max_msg_timeout:
            raise ConfigError(
                f"msg_timeout={self.msg_timeout} is above max_msg_timeout={self.max_msg_timeout}"
            )
        for name in ("max_msg_size", "max_body_size", "max_rdy_count", "max_output_buffer_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name}={value!r} must be an int above 0")
        for name in ("max_channel_consumers", "max_connections"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name}={value!r} must be an int >= 0 (0: no limit)")
        if self.max_body_size < self.max_msg_size:
            raise ConfigError(
                f"max_body_size={self.max_body_size} is below max_msg_size={self.max_msg_size}"
            )
        if not 1 <= self.max_deflate_level <= 9:
            raise ConfigError(f"max_deflate_level={self.max_deflate_level!r} must be 1 to 9")
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

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """Every option name, in declaration order."""
        return tuple(f.name for f in fields(cls))

    @property
    def auth_enabled(self) -> bool:
        """``True`` when clients must AUTH (an auth server or policy is set)."""
        return bool(self.auth_http_addresses) or self.auth_policy is not None
