"""How nsqd cuts a compressed connection's output into socket writes.

nsqd v1.3.0 puts Go's stream writers between its ``bufio.Writer`` and the
socket, and each of them writes to the socket as it goes. Traced with
``strace -e write`` on the real binary (the transcript is in
``tests/broker/test_wire.py``):

* **snappy** (``golang/snappy``'s unbuffered ``Writer``): for every chunk of a
  flush, a chunk that compression does not shrink by 1/8 is sent
  *uncompressed* in two writes, the 8-byte chunk header (preceded by the
  10-byte stream identifier on the first chunk of the stream) and then the
  data; a compressed chunk leaves in one write. Small frames (``OK``,
  heartbeats, short messages) are all of the first kind.
* **deflate** (``compress/flate``'s ``Writer.Flush``): every flush is two
  writes, the compressed bytes (ending in the first bits of an empty stored
  block) and then the stored block's ``00 00 ff ff``. A flush with nothing
  pending still writes an empty sync block, as ``00`` and ``00 00 ff ff``;
  nsqd's message pump forces such a flush each time it wakes while the client
  cannot take messages (after IDENTIFY, SUB, a heartbeat, RDY, FIN or REQ
  while RDY is used up).

The embedded broker reproduces those boundaries, because clients read what
one ``recv`` returns: a client that assumes every read decompresses to
something (pynsq 0.9.1, see ``tests/interop/test_interop_pynsq.py``) breaks
on the real nsqd, and must break on ours too. Python's decoders cannot tell
the difference; only the cut points matter, so the compressed bytes
themselves come from :mod:`gnsqlite.codecs`. Pure code, no I/O.
"""

from __future__ import annotations

from ..codecs import Codec, DeflateCodec, SnappyCodec

__all__ = ["empty_flush_writes", "flush_writes"]

_CHUNK_HEADER = 4  # type byte + 24-bit little-endian length
_UNCOMPRESSED = 0x01
_CRC = 4
_STREAM_IDENTIFIER = 0xFF
_SYNC_TRAILER = 4  # the LEN/NLEN of an empty stored block: 00 00 ff ff
#: An empty stored block (header bits 000 padded to a byte, LEN 0, NLEN ~0).
#: Valid wherever the stream is byte-aligned, which it is after any flush of
#: DeflateCodec.encode; zlib itself writes nothing for a repeated sync flush.
_EMPTY_SYNC_BLOCK = b"\x00\x00\x00\xff\xff"


def flush_writes(codec: Codec, data: bytes) -> list[bytes]:
    """The socket writes nsqd makes to flush ``data`` through ``codec``.

    Their concatenation is ``codec.encode(data)``; an empty ``data`` gives no
    write (for deflate's forced flush of nothing, see :func:`empty_flush_writes`).
    """
    encoded = codec.encode(data)
    if not encoded:
        return []
    if isinstance(codec, SnappyCodec):
        return _snappy_writes(encoded)
    if isinstance(codec, DeflateCodec):
        return _split_sync_trailer(encoded)
    return [encoded]


def empty_flush_writes(codec: Codec) -> list[bytes]:
    """The writes of a flush with nothing pending: deflate's empty sync block, else none."""
    if isinstance(codec, DeflateCodec):
        return _split_sync_trailer(_EMPTY_SYNC_BLOCK)
    return []


def _split_sync_trailer(encoded: bytes) -> list[bytes]:
    if len(encoded) <= _SYNC_TRAILER:
        return [encoded]
    return [encoded[:-_SYNC_TRAILER], encoded[-_SYNC_TRAILER:]]


def _snappy_writes(encoded: bytes) -> list[bytes]:
    """Cut a framing-format stream the way ``golang/snappy``'s Writer writes it."""
    writes: list[bytes] = []
    pending = b""  # the stream identifier travels with the chunk after it
    pos = 0
    while pos < len(encoded):
        kind = encoded[pos]
        length = int.from_bytes(encoded[pos + 1 : pos + _CHUNK_HEADER], "little")
        end = pos + _CHUNK_HEADER + length
        chunk = encoded[pos:end]
        pos = end
        if kind == _STREAM_IDENTIFIER:
            pending += chunk
        elif kind == _UNCOMPRESSED:
            split = _CHUNK_HEADER + _CRC
            writes += [pending + chunk[:split], chunk[split:]]
            pending = b""
        else:
            writes.append(pending + chunk)
            pending = b""
    if pending:
        writes.append(pending)
    return writes
