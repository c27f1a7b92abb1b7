"""The stream codecs nsqd negotiates: snappy (framing format) and raw deflate.

Each codec is one direction-pair of stateful transforms: :meth:`encode` turns
bytes to send into compressed bytes that the peer can decode at once (each
call is flushed), :meth:`decode` turns any slice of the received compressed
stream into the plain bytes it completes. Both sides of a connection (client
and embedded broker) use these; they do no I/O.

* snappy: the framing format (stream identifier ``\\xff\\x06\\x00\\x00sNaPpY``
  then checksummed chunks), as nsqd writes it; built on python-snappy's
  stream classes rather than by hand.
* deflate: raw deflate (no zlib header, ``wbits=-15``) with a sync flush
  after every write, at the negotiated level.
"""

from __future__ import annotations

import zlib
from typing import Protocol

import snappy

__all__ = ["Codec", "SnappyCodec", "DeflateCodec", "make_codec"]


class Codec(Protocol):
    """What a connection needs from a compression codec."""

    def encode(self, data: bytes) -> bytes:
        """Compress ``data`` and flush, so the peer can decode all of it now."""
        ...

    def decode(self, data: bytes) -> bytes:
        """Decompress a slice of the stream; returns what it completes (maybe ``b""``)."""
        ...


class SnappyCodec:
    """Snappy framing-format stream in both directions."""

    def __init__(self) -> None:
        self._compressor = snappy.StreamCompressor()
        self._decompressor = snappy.StreamDecompressor()

    def encode(self, data: bytes) -> bytes:
        out: bytes = self._compressor.add_chunk(data)
        return out

    def decode(self, data: bytes) -> bytes:
        out: bytes = self._decompressor.decompress(data)
        return out


class DeflateCodec:
    """Raw deflate in both directions; ``level`` is 1 (fast) to 9 (small)."""

    def __init__(self, level: int = 6) -> None:
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._decompressor = zlib.decompressobj(-15)

    def encode(self, data: bytes) -> bytes:
        return self._compressor.compress(data) + self._compressor.flush(zlib.Z_SYNC_FLUSH)

    def decode(self, data: bytes) -> bytes:
        return self._decompressor.decompress(data)


def make_codec(kind: str, deflate_level: int = 6) -> Codec:
    """The codec for an upgrade name: ``"snappy"`` or ``"deflate"``."""
    if kind == "snappy":
        return SnappyCodec()
    if kind == "deflate":
        return DeflateCodec(deflate_level)
    raise ValueError(f"unknown compression {kind!r}: use 'snappy' or 'deflate'")
