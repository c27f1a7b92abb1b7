"""The trace envelope: a message body carrying W3C trace context, as a pure codec.

NSQ messages have no headers, so a producer that wants its trace to reach
the consumer (:mod:`gnsqlite.tracing`, ``envelope=True``) publishes the body
inside this envelope, and a consumer that opts in takes it out again before
its handler runs. ``docs/tracing.md`` draws it byte by byte::

    offset  size  field
    0       4     magic: FF 4E 54 43 (0xFF, then "NTC")
    4       1     version: 1
    5       1     traceparent length P (0-255)
    6       2     tracestate length S (big-endian, 0-65535)
    8       4     body length B (big-endian)
    12      P     traceparent (printable ASCII)
    12+P    S     tracestate (printable ASCII)
    12+P+S  B     the body, as published; 12+P+S+B is the whole envelope

The first byte 0xFF never starts UTF-8 text (JSON included), so a plain
body of text is never taken for an envelope. :func:`open_envelope`
returns ``None`` for a body without the magic (a plain body: hand it over
as it is), and raises :class:`~gnsqlite.errors.EnvelopeError` for one that
has the magic but does not parse (an unknown version, lengths that do not
add up to the body's size, a header that is not printable ASCII).

No I/O, no clock, nothing imported beyond the standard library and
:mod:`gnsqlite.errors`: the codec is the same for every front end.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import EnvelopeError

__all__ = [
    "HEADER_SIZE",
    "MAGIC",
    "VERSION",
    "TraceEnvelope",
    "is_envelope",
    "open_envelope",
    "seal_envelope",
]

#: The four bytes every envelope starts with.
MAGIC = b"\xffNTC"
#: The version this codec writes and reads.
VERSION = 1
#: magic, version, traceparent length, tracestate length, body length.
_HEADER = struct.Struct(">4sBBHI")
#: The size of the fixed header, in bytes (before traceparent, tracestate and body).
HEADER_SIZE = _HEADER.size
_MAX_TRACEPARENT = 0xFF
_MAX_TRACESTATE = 0xFFFF
_MAX_BODY = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class TraceEnvelope:
    """What an envelope carries: W3C ``traceparent`` and ``tracestate`` (``""``: none), the body."""

    traceparent: str
    tracestate: str
    body: bytes


def is_envelope(data: bytes) -> bool:
    """Whether ``data`` starts with the envelope's magic (it may still not parse)."""
    return data[:4] == MAGIC


def _header_text(value: str, name: str, limit: int) -> bytes:
    """``value`` as ASCII bytes, checked: printable ASCII and at most ``limit`` bytes."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not (value.isascii() and value.isprintable()):
        raise EnvelopeError(f"{name} {value!r} is not printable ASCII (W3C trace context is)")
    raw = value.encode("ascii")
    if len(raw) > limit:
        raise EnvelopeError(f"{name} is {len(raw)} bytes: at most {limit} fit in an envelope")
    return raw


def seal_envelope(body: bytes, traceparent: str, tracestate: str = "") -> bytes:
    """The envelope of ``body`` with ``traceparent`` and ``tracestate`` (see the module docstring).

    Raises :class:`~gnsqlite.errors.EnvelopeError` when a header is not
    printable ASCII or too long (traceparent 255 bytes, tracestate 65,535),
    or the body is 4 GiB or more; ``TypeError`` for a body that is not bytes.
    """
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise TypeError(f"the body must be bytes, not {type(body).__name__}")
    parent = _header_text(traceparent, "traceparent", _MAX_TRACEPARENT)
    state = _header_text(tracestate, "tracestate", _MAX_TRACESTATE)
    if len(body) > _MAX_BODY:
        raise EnvelopeError(f"a body of {len(body)} bytes does not fit in an envelope (< 4 GiB)")
    header = _HEADER.pack(MAGIC, VERSION, len(parent), len(state), len(body))
    return b"".join((header, parent, state, body))


def open_envelope(data: bytes) -> TraceEnvelope | None:
    """What the envelope ``data`` carries; ``None`` when ``data`` is not one (no magic).

    Raises :class:`~gnsqlite.errors.EnvelopeError` saying what is wrong when
    ``data`` has the magic but does not parse: shorter than the header, an
    unknown version, lengths that do not add up to ``len(data)``, or a
    header that is not printable ASCII.
    """
    if data[:4] != MAGIC:
        return None
    if len(data) < HEADER_SIZE:
        raise EnvelopeError(
            f"a trace envelope of {len(data)} bytes: shorter than its {HEADER_SIZE}-byte header"
        )
    _, version, parent_len, state_len, body_len = _HEADER.unpack_from(data)
    if version != VERSION:
        raise EnvelopeError(f"trace envelope version {version}: this reader knows {VERSION}")
    expected = HEADER_SIZE + parent_len + state_len + body_len
    if expected != len(data):
        raise EnvelopeError(
            f"a trace envelope of {len(data)} bytes whose lengths (traceparent {parent_len},"
            f" tracestate {state_len}, body {body_len}) add up to {expected}"
        )
    start = HEADER_SIZE + parent_len
    parent, state = data[HEADER_SIZE:start], data[start : start + state_len]
    texts = []
    for name, raw in (("traceparent", parent), ("tracestate", state)):
        text = raw.decode("latin-1")
        if not (text.isascii() and text.isprintable()):
            raise EnvelopeError(
                f"the trace envelope's {name} {bytes(raw)!r} is not printable ASCII"
            )
        texts.append(text)
    return TraceEnvelope(texts[0], texts[1], bytes(data[start + state_len :]))
