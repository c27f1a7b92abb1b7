"""The stream codecs nsqd negotiates: snappy (framing format) and raw deflate.

Each codec is one direction-pair of stateful transforms: :meth:`Codec.encode`
turns bytes to send into compressed bytes that the peer can decode at once
(each call is flushed), :meth:`Codec.decode` turns any slice of the received
compressed stream, split anywhere, into the plain bytes it completes (bytes
of an unfinished chunk are kept for the next call). Both sides of a
connection (client and embedded broker) use these; they do no I/O.

* snappy: the framing format nsqd writes (a stream identifier chunk
  ``\\xff\\x06\\x00\\x00sNaPpY``, then checksummed chunks of at most 64 KiB),
  built on python-snappy's stream classes rather than by hand.
* deflate: raw deflate (no zlib header, ``wbits=-15``) with a sync flush
  after every write, at the negotiated level.

Decoding can be bounded: ``decode(data, max_length)`` returns at most
``max_length`` plain bytes and keeps the rest of its input (``pending`` is then
true; ``decode(b"", max_length)`` continues). A reader that must not buffer
what a peer's compression ratio decides (256 KiB of deflate inflate to 256 MiB)
decodes in bounded steps and parses between them.
"""

from __future__ import annotations

import zlib
from typing import Protocol

import snappy

from .errors import RemoteProtocolError

__all__ = ["Codec", "SnappyCodec", "DeflateCodec", "make_codec", "SNAPPY_STREAM_IDENTIFIER"]

#: The chunk that starts every snappy framing-format stream.
SNAPPY_STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"


class Codec(Protocol):
    """What a connection needs from a compression codec."""

    @property
    def name(self) -> str:
        """``"snappy"`` or ``"deflate"``."""
        ...

    def encode(self, data: bytes) -> bytes:
        """Compress ``data`` and flush, so the peer can decode all of it now."""
        ...

    def decode(self, data: bytes, max_length: int = 0) -> bytes:
        """Decompress a slice of the stream; returns what it completes (maybe ``b""``).

        With ``max_length`` above 0 at most that many bytes are returned and
        the rest is kept (see :attr:`pending`). Raises
        :class:`~gnsqlite.errors.RemoteProtocolError` when the bytes are not a
        valid stream (a bad checksum, a corrupt chunk).
        """
        ...

    @property
    def pending(self) -> bool:
        """``True`` when a bounded :meth:`decode` left input or output to return."""
        ...


class SnappyCodec:
    """Snappy framing-format stream in both directions.

    The first :meth:`encode` output starts with the stream identifier chunk;
    :meth:`decode` accepts the stream split at any byte.
    """

    name = "snappy"

    def __init__(self) -> None:
        self._compressor = snappy.StreamCompressor()
        self._decompressor = snappy.StreamDecompressor()
        self._plain = b""  # decoded bytes a bounded decode has not returned yet

    def encode(self, data: bytes) -> bytes:
        if not data:
            return b""
        out: bytes = self._compressor.add_chunk(data)
        return out

    def decode(self, data: bytes, max_length: int = 0) -> bytes:
        # A framing-format chunk inflates to at most 64 KiB, so one call's
        # output is bounded by its input (about 21 times); the bound only
        # splits what is returned.
        out = self._plain
        if data:
            try:
                out += self._decompressor.decompress(data)
            except Exception as exc:  # python-snappy raises OSError, UncompressError ...
                raise RemoteProtocolError(f"undecodable snappy stream: {exc}") from exc
        if max_length > 0 and len(out) > max_length:
            self._plain = out[max_length:]
            return out[:max_length]
        self._plain = b""
        return out

    @property
    def pending(self) -> bool:
        return bool(self._plain)


class DeflateCodec:
    """Raw deflate in both directions; ``level`` is 1 (fast) to 9 (small)."""

    name = "deflate"

    def __init__(self, level: int = 6) -> None:
        if not 1 <= level <= 9:
            raise ValueError(f"deflate level must be from 1 to 9, not {level!r}")
        self.level = level
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._decompressor = zlib.decompressobj(-15)
        self._full = False  # the last bounded decode stopped at its bound

    def encode(self, data: bytes) -> bytes:
        if not data:
            return b""
        return self._compressor.compress(data) + self._compressor.flush(zlib.Z_SYNC_FLUSH)

    def decode(self, data: bytes, max_length: int = 0) -> bytes:
        # zlib keeps the input it did not inflate in unconsumed_tail: feed it
        # first, so a bounded call inflates no more than max_length bytes.
        tail = self._decompressor.unconsumed_tail
        if tail:
            data = tail + data
        try:
            out = self._decompressor.decompress(data, max(max_length, 0))
        except zlib.error as exc:
            raise RemoteProtocolError(f"undecodable deflate stream: {exc}") from exc
        # zlib may hold output of input it consumed (a long match): stopping
        # at the bound means "call again" even with no input left over
        self._full = 0 < max_length <= len(out)
        return out

    @property
    def pending(self) -> bool:
        return self._full or bool(self._decompressor.unconsumed_tail)


def make_codec(kind: str, deflate_level: int = 6) -> Codec:
    """The codec for an upgrade name: ``"snappy"`` or ``"deflate"`` (at ``deflate_level``)."""
    if kind == "snappy":
        return SnappyCodec()
    if kind == "deflate":
        return DeflateCodec(deflate_level)
    raise ValueError(f"unknown compression {kind!r}: use 'snappy' or 'deflate'")
