"""The trace envelope's codec (gnsqlite.trace_envelope): round trip, and every way to be bad."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gnsqlite.errors import EnvelopeError
from gnsqlite.trace_envelope import (
    HEADER_SIZE,
    MAGIC,
    TraceEnvelope,
    is_envelope,
    open_envelope,
    seal_envelope,
)

pytestmark = pytest.mark.no_server

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
printable = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E))


def test_the_layout_is_the_documented_one_byte_by_byte() -> None:
    sealed = seal_envelope(b"hello", PARENT, "k=v")
    assert sealed[:4] == b"\xffNTC" == MAGIC
    assert sealed[4] == 1  # version
    assert sealed[5] == len(PARENT) == 55
    assert sealed[6:8] == b"\x00\x03"  # tracestate length, big-endian
    assert sealed[8:12] == b"\x00\x00\x00\x05"  # body length, big-endian
    assert HEADER_SIZE == 12
    assert sealed[12:67] == PARENT.encode()
    assert sealed[67:70] == b"k=v"
    assert sealed[70:] == b"hello"


@given(
    body=st.binary(max_size=2000),
    parent=printable.filter(lambda s: len(s) <= 255),
    state=printable,
)
def test_what_is_sealed_opens_to_the_same(body: bytes, parent: str, state: str) -> None:
    sealed = seal_envelope(body, parent, state)
    assert is_envelope(sealed)
    assert open_envelope(sealed) == TraceEnvelope(parent, state, body)


@given(st.binary(max_size=200).filter(lambda b: not b.startswith(MAGIC)))
def test_a_body_without_the_magic_is_not_an_envelope(body: bytes) -> None:
    assert not is_envelope(body)
    assert open_envelope(body) is None


@given(body=st.binary(max_size=100), cut=st.integers(min_value=1))
def test_a_truncated_envelope_is_refused_saying_so(body: bytes, cut: int) -> None:
    sealed = seal_envelope(body, PARENT)
    short = sealed[: max(4, len(sealed) - cut)]  # still has the magic
    with pytest.raises(EnvelopeError, match="trace envelope of"):
        open_envelope(short)


@given(body=st.binary(max_size=100), extra=st.binary(min_size=1, max_size=10))
def test_bytes_past_the_declared_lengths_are_refused(body: bytes, extra: bytes) -> None:
    with pytest.raises(EnvelopeError, match="add up to"):
        open_envelope(seal_envelope(body, PARENT) + extra)


@pytest.mark.parametrize(
    "lengths",
    [(56, 0, 5), (55, 1, 5), (55, 0, 4), (55, 0, 6), (255, 65535, 0xFFFFFFFF)],
)
def test_lengths_that_do_not_add_up_are_refused(lengths: tuple[int, int, int]) -> None:
    parent_len, state_len, body_len = lengths
    data = struct.pack(">4sBBHI", MAGIC, 1, parent_len, state_len, body_len)
    data += PARENT.encode() + b"hello"
    with pytest.raises(EnvelopeError, match="add up to"):
        open_envelope(data)


def test_bad_magic_or_version_or_header_bytes() -> None:
    sealed = seal_envelope(b"x", PARENT)
    assert open_envelope(b"\xffNTD" + sealed[4:]) is None  # another magic: a plain body
    with pytest.raises(EnvelopeError, match="version 2"):
        open_envelope(sealed[:4] + b"\x02" + sealed[5:])
    with pytest.raises(EnvelopeError, match="not printable ASCII"):
        open_envelope(sealed[:12] + b"\x00" + sealed[13:])
    with pytest.raises(EnvelopeError, match="shorter than its 12-byte header"):
        open_envelope(MAGIC + b"\x01")


def test_sealing_refuses_what_cannot_be_carried() -> None:
    with pytest.raises(EnvelopeError, match=r"traceparent .* not printable ASCII"):
        seal_envelope(b"x", "caf\u00e9")
    with pytest.raises(EnvelopeError, match=r"tracestate .* not printable ASCII"):
        seal_envelope(b"x", PARENT, "a=b\n")
    with pytest.raises(EnvelopeError, match="at most 255"):
        seal_envelope(b"x", "0" * 256)
    with pytest.raises(TypeError, match="traceparent must be a str"):
        seal_envelope(b"x", b"00-")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="body must be bytes"):
        seal_envelope("x", PARENT)  # type: ignore[arg-type]


def test_utf8_text_never_starts_an_envelope() -> None:
    # 0xFF is never a byte of UTF-8: a JSON or text body is never taken for one
    for text in ("{}", "\u00ff\u00ff", "\U0001f600", "NTC"):
        assert not is_envelope(text.encode())
