"""Command lines for nsqd and nsqlookupd, ours or the real binaries.

One function per server builds the whole argv, so a unit test can check
exactly what would run. Options are given in Python units, named after
nsqd's flags with underscores (``msg_timeout=2.0``, ``max_rdy_count=10``,
``tls_cert=path``, ``snappy=True``) and written the way Go's ``flag`` package
reads them, which our broker's command line also accepts: always
``--name=value``, durations as milliseconds (``--msg-timeout=2000ms``),
booleans as ``true``/``false``, lists as the flag repeated.

When ``bin_dir`` is given (the ``GNSQLITE_NSQD`` directory) the real
``nsqd``/``nsqlookupd`` found there is run; otherwise
``python -m gnsqlite.broker`` / ``python -m gnsqlite.broker.lookupd``.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import ConfigError

__all__ = [
    "DURATION_OPTIONS",
    "NSQD_OPTIONS",
    "go_duration",
    "lookupd_argv",
    "nsqd_argv",
    "nsqd_flags",
]

#: nsqd options that are durations (float seconds in Python, Go durations on the wire).
DURATION_OPTIONS = frozenset(
    {
        "msg_timeout",
        "max_msg_timeout",
        "max_req_timeout",
        "max_heartbeat_interval",
        "max_output_buffer_timeout",
        "min_output_buffer_timeout",
        "output_buffer_timeout",
        "sync_timeout",
        "statsd_interval",
        "e2e_processing_latency_window_time",
        "http_client_connect_timeout",
        "http_client_request_timeout",
    }
)

#: Every nsqd flag a test may set (nsqd v1.x ``apps/nsqd/options.go``), minus the
#: addresses and data path the launcher chooses itself.
NSQD_OPTIONS = DURATION_OPTIONS | frozenset(
    {
        "auth_http_addresses",
        "lookupd_tcp_addresses",
        "mem_queue_size",
        "max_bytes_per_file",
        "sync_every",
        "max_msg_size",
        "max_body_size",
        "max_rdy_count",
        "max_output_buffer_size",
        "max_channel_consumers",
        "statsd_address",
        "statsd_mem_stats",
        "statsd_prefix",
        "statsd_udp_packet_size",
        "e2e_processing_latency_percentile",
        "tls_cert",
        "tls_key",
        "tls_client_auth_policy",
        "tls_root_ca_file",
        "tls_required",
        "tls_min_version",
        "deflate",
        "max_deflate_level",
        "snappy",
        "node_id",
        "log_level",
        "log_prefix",
    }
)

#: Singular spellings accepted for the repeatable flags.
_ALIASES = {
    "auth_http_address": "auth_http_addresses",
    "lookupd_tcp_address": "lookupd_tcp_addresses",
}
#: Repeatable options whose flag name is singular.
_REPEATED_FLAG = {
    "auth_http_addresses": "auth-http-address",
    "lookupd_tcp_addresses": "lookupd-tcp-address",
    "e2e_processing_latency_percentile": "e2e-processing-latency-percentile",
}


def go_duration(seconds: float | str) -> str:
    """Float seconds as a Go duration nsqd's flags read: ``2.0`` -> ``"2000ms"``.

    A string is passed through unchanged (``"1m0s"``). Whole milliseconds are
    written as ``ms``, anything finer as ``us``.
    """
    if isinstance(seconds, str):
        return seconds
    if isinstance(seconds, bool) or not math.isfinite(seconds) or seconds < 0:
        raise ConfigError(f"a duration must be a finite number of seconds >= 0, not {seconds!r}")
    micros = round(seconds * 1_000_000)
    if micros % 1000 == 0:
        return f"{micros // 1000}ms"
    return f"{micros}us"


def _value(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if name in DURATION_OPTIONS:
        return go_duration(value)
    if isinstance(value, (int, float, str, os.PathLike)):
        return os.fspath(value) if isinstance(value, os.PathLike) else str(value)
    raise ConfigError(f"{name}={value!r}: use a number, a string, a path or a bool")


def _addresses(value: Any) -> list[str]:
    """An address, a server with ``tcp_address``, or a sequence of either."""
    if value is None:
        return []
    if isinstance(value, str) or hasattr(value, "tcp_address"):
        value = [value]
    out = []
    for item in value:
        out.append(str(getattr(item, "tcp_address", item)))
    return out


def nsqd_flags(options: Mapping[str, Any]) -> list[str]:
    """nsqd flags for ``options`` in Python units, in the order given.

    ``lookupd`` may be a :class:`~gnsqlite.testing.LookupdServer` (or its TCP
    address, or a list of either) and becomes ``--lookupd-tcp-address``. Options
    set to ``None`` are left out. Raises :class:`~gnsqlite.errors.ConfigError`
    for an option nsqd does not have.
    """
    flags: list[str] = []
    for raw_name, value in options.items():
        if value is None:
            continue
        if raw_name == "lookupd":
            name = "lookupd_tcp_addresses"
            value = _addresses(value)
        else:
            name = _ALIASES.get(raw_name, raw_name)
        if name not in NSQD_OPTIONS:
            raise ConfigError(f"{raw_name!r} is not an nsqd option")
        if name in _REPEATED_FLAG:
            items: Iterable[Any] = (
                _addresses(value)
                if name.endswith("addresses")
                else [value]
                if isinstance(value, (str, int, float))
                else value
            )
            flags.extend(f"--{_REPEATED_FLAG[name]}={_value(name, v)}" for v in items)
        else:
            flags.append(f"--{name.replace('_', '-')}={_value(name, value)}")
    return flags


def nsqd_argv(
    *,
    tcp_address: str,
    http_address: str,
    data_path: str,
    options: Mapping[str, Any] | None = None,
    broadcast_address: str = "127.0.0.1",
    bin_dir: str | None = None,
    https_address: str | None = None,
) -> list[str]:
    """The full command line of one nsqd.

    With ``bin_dir`` it runs ``bin_dir/nsqd`` and, because the real nsqd
    listens for HTTPS on 0.0.0.0:4152 whenever TLS is configured,
    ``https_address`` (required then) moves that listener to a free port.
    The embedded broker listens for HTTPS only when ``https_address`` is given.
    """
    if bin_dir is not None:
        if https_address is None:
            raise ConfigError("https_address is required when running the real nsqd")
        head = [os.path.join(bin_dir, "nsqd")]
    else:
        head = [sys.executable, "-m", "gnsqlite.broker"]
    if https_address is not None:
        head.append(f"--https-address={https_address}")
    return [
        *head,
        f"--tcp-address={tcp_address}",
        f"--http-address={http_address}",
        f"--broadcast-address={broadcast_address}",
        f"--data-path={data_path}",
        *nsqd_flags(options or {}),
    ]


def lookupd_argv(
    *,
    tcp_address: str,
    http_address: str,
    broadcast_address: str = "127.0.0.1",
    bin_dir: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The full command line of one nsqlookupd (``bin_dir/nsqlookupd`` or ours)."""
    if bin_dir is not None:
        head = [os.path.join(bin_dir, "nsqlookupd")]
    else:
        head = [sys.executable, "-m", "gnsqlite.broker.lookupd"]
    return [
        *head,
        f"--tcp-address={tcp_address}",
        f"--http-address={http_address}",
        f"--broadcast-address={broadcast_address}",
        *extra,
    ]
