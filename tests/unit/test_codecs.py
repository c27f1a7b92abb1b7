"""The snappy framing and raw deflate codecs: real streams, split anywhere.

The snappy checks parse the framing format by hand (chunk types, lengths,
masked CRC-32C) so the codec is held to the format nsqd's Go library writes
and reads, not only to itself.
"""

from __future__ import annotations

import os
import random
import struct
import zlib

import pytest
import snappy
from hypothesis import given, settings
from hypothesis import strategies as st

from gnsqlite.codecs import (
    SNAPPY_STREAM_IDENTIFIER,
    DeflateCodec,
    SnappyCodec,
    make_codec,
)
from gnsqlite.errors import RemoteProtocolError

pytestmark = pytest.mark.no_server

# -- a reference implementation of the snappy framing format ----------------


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def parse_framed(stream: bytes) -> list[tuple[int, bytes]]:
    """Split a framing-format stream into (chunk type, uncompressed data), checking CRCs."""
    chunks: list[tuple[int, bytes]] = []
    pos = 0
    while pos < len(stream):
        kind = stream[pos]
        length = int.from_bytes(stream[pos + 1 : pos + 4], "little")
        payload = stream[pos + 4 : pos + 4 + length]
        assert len(payload) == length, "truncated chunk"
        pos += 4 + length
        if kind == 0xFF:
            assert payload == b"sNaPpY"
            chunks.append((kind, b""))
        elif kind in (0x00, 0x01):
            (crc,) = struct.unpack("<I", payload[:4])
            data = snappy.uncompress(payload[4:]) if kind == 0x00 else payload[4:]
            assert len(data) <= 65536, "a chunk holds at most 64 KiB of data"
            assert crc == masked_crc(data), "bad checksum"
            chunks.append((kind, data))
        else:
            raise AssertionError(f"unexpected chunk type {kind:#x}")
    return chunks


def go_style_chunk(data: bytes, compress: bool) -> bytes:
    """A chunk as golang/snappy's Writer emits it (compressed 0x00 or raw 0x01)."""
    crc = struct.pack("<I", masked_crc(data))
    body = crc + (snappy.compress(data) if compress else data)
    kind = 0x00 if compress else 0x01
    return bytes([kind]) + len(body).to_bytes(3, "little") + body


def feed_split(decode: object, stream: bytes, cuts: list[int]) -> bytes:
    out = []
    last = 0
    for cut in [*sorted(set(cuts)), len(stream)]:
        out.append(decode(stream[last:cut]))  # type: ignore[operator]
        last = cut
    return b"".join(out)


# -- snappy ------------------------------------------------------------------


def test_snappy_stream_starts_with_the_stream_identifier_chunk_once() -> None:
    codec = SnappyCodec()
    first = codec.encode(b"OK")
    second = codec.encode(b"more")
    assert first.startswith(SNAPPY_STREAM_IDENTIFIER)
    assert not second.startswith(SNAPPY_STREAM_IDENTIFIER)
    assert parse_framed(first + second) == [(0xFF, b""), (first[10], b"OK"), (second[0], b"more")]


def test_snappy_splits_large_writes_into_64k_chunks_with_valid_checksums() -> None:
    data = os.urandom(200_000) + b"a" * 100_000
    chunks = parse_framed(SnappyCodec().encode(data))
    assert chunks[0] == (0xFF, b"")
    assert b"".join(d for _, d in chunks[1:]) == data
    assert len(chunks) > 4


def test_snappy_decodes_what_golang_snappy_writes() -> None:
    parts = [b"x" * 70, os.urandom(300), b"OK", b"y" * 65536]
    stream = SNAPPY_STREAM_IDENTIFIER + b"".join(
        go_style_chunk(p, compress=i % 2 == 0) for i, p in enumerate(parts)
    )
    assert SnappyCodec().decode(stream) == b"".join(parts)


def test_snappy_empty_write_sends_nothing() -> None:
    codec = SnappyCodec()
    assert codec.encode(b"") == b""
    assert codec.decode(b"") == b""
    assert codec.encode(b"a").startswith(SNAPPY_STREAM_IDENTIFIER)


def test_snappy_corrupt_stream_raises_a_protocol_error() -> None:
    stream = bytearray(SnappyCodec().encode(b"hello world" * 10))
    stream[16] ^= 0xFF  # inside the first data chunk
    with pytest.raises(RemoteProtocolError, match="undecodable snappy stream"):
        SnappyCodec().decode(bytes(stream))


def test_deflate_corrupt_stream_raises_a_protocol_error() -> None:
    with pytest.raises(RemoteProtocolError, match="undecodable deflate stream"):
        DeflateCodec().decode(b"\xff\xff\xff\xff")


@settings(max_examples=200, deadline=None)
@given(
    messages=st.lists(st.binary(min_size=1, max_size=3000), min_size=1, max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=30000), max_size=12),
)
def test_snappy_round_trip_split_at_any_byte(messages: list[bytes], cuts: list[int]) -> None:
    sender, receiver = SnappyCodec(), SnappyCodec()
    stream = b"".join(sender.encode(m) for m in messages)
    cuts = [c % (len(stream) + 1) for c in cuts]
    assert feed_split(receiver.decode, stream, cuts) == b"".join(messages)


def test_snappy_decoding_one_byte_at_a_time() -> None:
    sender = SnappyCodec()
    data = [os.urandom(50) * 10, b"OK", os.urandom(700)]
    stream = b"".join(sender.encode(d) for d in data)
    receiver = SnappyCodec()
    out = b"".join(receiver.decode(stream[i : i + 1]) for i in range(len(stream)))
    assert out == b"".join(data)


# -- deflate -----------------------------------------------------------------


def test_deflate_is_raw_and_each_write_is_decodable_at_once() -> None:
    codec = DeflateCodec(6)
    first = codec.encode(b"OK")
    # Raw deflate: no zlib header; a sync flush ends every write on 00 00 ff ff.
    assert first[:2] != b"\x78\x9c"
    assert first.endswith(b"\x00\x00\xff\xff")
    peer = zlib.decompressobj(-15)
    assert peer.decompress(first) == b"OK"
    assert peer.decompress(codec.encode(b"again")) == b"again"


def test_deflate_decodes_what_go_flate_writes() -> None:
    # Go's flate.Writer + Flush() is raw deflate with a sync flush, like zlib's.
    writer = zlib.compressobj(3, zlib.DEFLATED, -15)
    stream = writer.compress(b"hello ") + writer.flush(zlib.Z_SYNC_FLUSH)
    stream += writer.compress(b"world") + writer.flush(zlib.Z_SYNC_FLUSH)
    assert DeflateCodec().decode(stream) == b"hello world"


@pytest.mark.parametrize("level", [1, 6, 9])
def test_deflate_level_is_used(level: int) -> None:
    data = b"".join(bytes([random.Random(i).randrange(4)]) * 7 for i in range(5000))
    out = DeflateCodec(level).encode(data)
    assert zlib.decompressobj(-15).decompress(out) == data
    expected = zlib.compressobj(level, zlib.DEFLATED, -15)
    assert out == expected.compress(data) + expected.flush(zlib.Z_SYNC_FLUSH)


@settings(max_examples=200, deadline=None)
@given(
    messages=st.lists(st.binary(min_size=1, max_size=3000), min_size=1, max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=30000), max_size=12),
    level=st.integers(min_value=1, max_value=9),
)
def test_deflate_round_trip_split_at_any_byte(
    messages: list[bytes], cuts: list[int], level: int
) -> None:
    sender, receiver = DeflateCodec(level), DeflateCodec(level)
    stream = b"".join(sender.encode(m) for m in messages)
    cuts = [c % (len(stream) + 1) for c in cuts]
    assert feed_split(receiver.decode, stream, cuts) == b"".join(messages)


def test_deflate_rejects_a_bad_level() -> None:
    with pytest.raises(ValueError, match="from 1 to 9"):
        DeflateCodec(0)


def test_make_codec_names() -> None:
    assert isinstance(make_codec("snappy"), SnappyCodec)
    deflate = make_codec("deflate", 2)
    assert isinstance(deflate, DeflateCodec)
    assert deflate.level == 2
    assert make_codec("snappy").name == "snappy"
    with pytest.raises(ValueError, match="unknown compression 'lz4'"):
        make_codec("lz4")
