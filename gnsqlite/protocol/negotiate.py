"""IDENTIFY on the server side: a client's JSON body -> its settings and nsqd's answer.

:func:`negotiate_identify` validates the body as nsqd v1.3.0 does (its
error codes and texts) against the server's :class:`IdentifyLimits` and
returns the :class:`Negotiated` settings. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ServerError
from . import defaults
from .server_frames import client_error

__all__ = ["IdentifyLimits", "Negotiated", "negotiate_identify"]


@dataclass(frozen=True, slots=True)
class IdentifyLimits:
    """What the server allows and offers; durations in milliseconds, sizes in bytes."""

    version: str
    max_rdy_count: int = defaults.MAX_RDY_COUNT
    msg_timeout_ms: int = round(defaults.MSG_TIMEOUT * 1000)
    max_msg_timeout_ms: int = round(defaults.MAX_MSG_TIMEOUT * 1000)
    heartbeat_interval_ms: int = round(defaults.HEARTBEAT_INTERVAL * 1000)
    max_heartbeat_interval_ms: int = round(defaults.MAX_HEARTBEAT_INTERVAL * 1000)
    output_buffer_size: int = defaults.OUTPUT_BUFFER_SIZE
    max_output_buffer_size: int = defaults.MAX_OUTPUT_BUFFER_SIZE
    output_buffer_timeout_ms: int = round(defaults.OUTPUT_BUFFER_TIMEOUT * 1000)
    min_output_buffer_timeout_ms: int = round(defaults.MIN_OUTPUT_BUFFER_TIMEOUT * 1000)
    max_output_buffer_timeout_ms: int = round(defaults.MAX_OUTPUT_BUFFER_TIMEOUT * 1000)
    tls: bool = False
    snappy: bool = True
    deflate: bool = True
    max_deflate_level: int = defaults.MAX_DEFLATE_LEVEL
    auth_required: bool = False


@dataclass(frozen=True, slots=True)
class Negotiated:
    """A client's settings after IDENTIFY; durations in milliseconds (0 = disabled).

    ``response`` is the response frame data to send (the JSON, or ``OK``);
    then, in this order, upgrade to TLS, snappy or deflate when set, each
    followed by an ``OK`` sent over the upgraded stream.
    """

    client_id: str
    hostname: str
    user_agent: str
    heartbeat_interval_ms: int
    output_buffer_size: int
    output_buffer_timeout_ms: int
    sample_rate: int
    msg_timeout_ms: int
    tls: bool
    snappy: bool
    deflate: bool
    deflate_level: int
    response: bytes


# nsqd v1.x's identifyDataV2 has no short_id/long_id (gone since 1.0): ignored like any
# unknown field
_STR_FIELDS = ("client_id", "hostname", "user_agent")
_INT_FIELDS = (
    "heartbeat_interval",
    "output_buffer_size",
    "output_buffer_timeout",
    "deflate_level",
    "sample_rate",
    "msg_timeout",
)
_BOOL_FIELDS = ("feature_negotiation", "tls_v1", "deflate", "snappy")


def _decode_identify(body: bytes) -> Mapping[str, Any]:
    failed = client_error("E_BAD_BODY", "IDENTIFY failed to decode JSON body")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # nesting deeper than Python's stack: refused too
        raise failed from None
    if data is None:
        data = {}  # Go's json.Unmarshal of null into a struct is a no-op, not an error
    if not isinstance(data, dict):
        raise failed
    for key in _STR_FIELDS:
        if key in data and data[key] is not None and not isinstance(data[key], str):
            raise failed
    for key in _INT_FIELDS:
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise failed
    for key in _BOOL_FIELDS:
        if data.get(key) is not None and not isinstance(data[key], bool):
            raise failed
    return data


def negotiate_identify(body: bytes, limits: IdentifyLimits) -> Negotiated:
    """Apply an IDENTIFY body as nsqd does; raises the fatal error nsqd would send."""
    data = _decode_identify(body)

    def bad(text: str) -> ServerError:
        return client_error("E_BAD_BODY", "IDENTIFY " + text)

    heartbeat = limits.heartbeat_interval_ms
    wanted = data.get("heartbeat_interval") or 0
    if wanted == -1:
        heartbeat = 0
    elif wanted != 0:
        if not 1000 <= wanted <= limits.max_heartbeat_interval_ms:
            raise bad(f"heartbeat interval ({wanted}) is invalid")
        heartbeat = wanted

    buffer_timeout = limits.output_buffer_timeout_ms
    wanted = data.get("output_buffer_timeout") or 0
    if wanted == -1:
        buffer_timeout = 0
    elif wanted != 0:
        if not (
            limits.min_output_buffer_timeout_ms <= wanted <= limits.max_output_buffer_timeout_ms
        ):
            raise bad(f"output buffer timeout ({wanted}) is invalid")
        buffer_timeout = wanted

    buffer_size = limits.output_buffer_size
    wanted = data.get("output_buffer_size") or 0
    if wanted == -1:
        buffer_size = 1
        buffer_timeout = 0
    elif wanted != 0:
        if not 64 <= wanted <= limits.max_output_buffer_size:
            raise bad(f"output buffer size ({wanted}) is invalid")
        buffer_size = wanted

    sample_rate = data.get("sample_rate") or 0
    if not 0 <= sample_rate <= 99:
        raise bad(f"sample rate ({sample_rate}) is invalid")

    msg_timeout = limits.msg_timeout_ms
    wanted = data.get("msg_timeout") or 0
    if wanted != 0:
        if not 1000 <= wanted <= limits.max_msg_timeout_ms:
            raise bad(f"msg timeout ({wanted}) is invalid")
        msg_timeout = wanted

    negotiate = bool(data.get("feature_negotiation"))
    tls = negotiate and limits.tls and bool(data.get("tls_v1"))
    deflate = negotiate and limits.deflate and bool(data.get("deflate"))
    deflate_level = 6
    wanted = data.get("deflate_level") or 0
    if deflate and wanted > 0:
        deflate_level = wanted
    deflate_level = min(deflate_level, limits.max_deflate_level)
    snappy = negotiate and limits.snappy and bool(data.get("snappy"))
    if deflate and snappy:
        raise client_error("E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression")

    if negotiate:
        response = json.dumps(
            {
                "max_rdy_count": limits.max_rdy_count,
                "version": limits.version,
                "max_msg_timeout": limits.max_msg_timeout_ms,
                "msg_timeout": msg_timeout,
                "tls_v1": tls,
                "deflate": deflate,
                "deflate_level": deflate_level,
                "max_deflate_level": limits.max_deflate_level,
                "snappy": snappy,
                "sample_rate": sample_rate,
                "auth_required": limits.auth_required,
                "output_buffer_size": buffer_size,
                "output_buffer_timeout": buffer_timeout,
            },
            separators=(",", ":"),
        ).encode("ascii")
    else:
        response = b"OK"
    return Negotiated(
        client_id=data.get("client_id") or "",
        hostname=data.get("hostname") or "",
        user_agent=data.get("user_agent") or "",
        heartbeat_interval_ms=heartbeat,
        output_buffer_size=buffer_size,
        output_buffer_timeout_ms=buffer_timeout,
        sample_rate=sample_rate,
        msg_timeout_ms=msg_timeout,
        tls=tls,
        snappy=snappy,
        deflate=deflate,
        deflate_level=deflate_level,
        response=response,
    )
