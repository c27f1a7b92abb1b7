"""The embedded broker cuts compressed output into nsqd's socket writes.

The expected writes were traced from the real nsqd v1.3.0 with
``strace -f -e trace=write -xx`` while a raw client sent IDENTIFY
(``{"snappy": true}`` or ``{"deflate": true}``), ``SUB t c``, ``RDY 1`` and
received a message and heartbeats. For snappy the bytes are identical
(an uncompressed chunk's header and CRC do not depend on the encoder);
for deflate Go's encoder picks other Huffman codes than zlib, so the
compressed bytes differ, and what is compared is where the writes are cut.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Callable
from typing import Any

import pytest

from gnsqlite.broker import Broker
from gnsqlite.broker.client import ClientSession
from gnsqlite.broker.wire import empty_flush_writes, flush_writes
from gnsqlite.codecs import DeflateCodec, SnappyCodec, make_codec
from gnsqlite.protocol.frames import HEARTBEAT, OK
from gnsqlite.protocol.server import response_frame
from gnsqlite.testing import wait_until

pytestmark = pytest.mark.embedded_only

# nsqd v1.3.0, snappy: the writes after the plain IDENTIFY response
NSQD_SNAPPY_FIRST_OK = [
    b"\xff\x06\x00\x00sNaPpY\x01\x0e\x00\x00&\x98+\xcf",  # stream identifier + chunk header
    b"\x00\x00\x00\x06\x00\x00\x00\x00OK",
]
NSQD_SNAPPY_NEXT_OK = [b"\x01\x0e\x00\x00&\x98+\xcf", b"\x00\x00\x00\x06\x00\x00\x00\x00OK"]
NSQD_SNAPPY_HEARTBEAT = [
    b"\x01\x17\x00\x00\x1f0\xa4D",
    b"\x00\x00\x00\x0f\x00\x00\x00\x00_heartbeat_",
]
# nsqd v1.3.0, deflate: an empty flush (the message pump waking, client not ready)
NSQD_DEFLATE_EMPTY_FLUSH = [b"\x00", b"\x00\x00\xff\xff"]
SYNC_TRAILER = b"\x00\x00\xff\xff"


def test_snappy_small_frames_are_two_writes_like_nsqd() -> None:
    codec = SnappyCodec()
    assert flush_writes(codec, response_frame(OK)) == NSQD_SNAPPY_FIRST_OK
    assert flush_writes(codec, response_frame(OK)) == NSQD_SNAPPY_NEXT_OK
    assert flush_writes(codec, response_frame(HEARTBEAT)) == NSQD_SNAPPY_HEARTBEAT
    assert empty_flush_writes(codec) == []  # golang/snappy writes nothing for nothing


def test_snappy_compressed_chunks_are_one_write_each() -> None:
    codec = SnappyCodec()
    data = b"compress me " * 20_000  # 240,000 bytes: four 64 KiB chunks, all compressible
    writes = flush_writes(codec, data)
    assert len(writes) == 4
    assert writes[0].startswith(b"\xff\x06\x00\x00sNaPpY\x00")  # identifier rides with chunk 1
    assert all(w[0] == 0x00 for w in writes[1:])
    assert SnappyCodec().decode(b"".join(writes)) == data


def test_deflate_flush_is_data_then_sync_trailer() -> None:
    codec = DeflateCodec(6)
    writes = flush_writes(codec, response_frame(OK))
    assert len(writes) == 2 and writes[1] == SYNC_TRAILER
    assert empty_flush_writes(codec) == NSQD_DEFLATE_EMPTY_FLUSH
    more = flush_writes(codec, response_frame(HEARTBEAT))
    assert len(more) == 2 and more[1] == SYNC_TRAILER
    stream = b"".join(writes + NSQD_DEFLATE_EMPTY_FLUSH + more)
    assert DeflateCodec(6).decode(stream) == response_frame(OK) + response_frame(HEARTBEAT)


class RecordingSocket:
    """Wraps a session's socket and records each ``sendall``."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self.writes: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self._sock.sendall(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _session_writes(broker: Broker, kind: str) -> tuple[list[bytes], Callable[[], list[bytes]]]:
    """Connect, let the test wrap the session socket, IDENTIFY and SUB; return the writes."""
    assert broker.tcp_address is not None
    host, port = broker.tcp_address.rsplit(":", 1)
    client = socket.create_connection((host, int(port)))
    client.sendall(b"  V2")
    session = wait_until(lambda: next(iter(broker.clients), None))
    assert isinstance(session, ClientSession)  # the TCP session behind broker.clients' Session
    recorder = RecordingSocket(session.output.sock)
    session.output.sock = recorder
    body = json.dumps({kind: True, "feature_negotiation": True}).encode()
    client.sendall(b"IDENTIFY\n" + struct.pack(">I", len(body)) + body)
    codec = make_codec(kind)
    wait_until(lambda: len(recorder.writes) >= 3)
    client.sendall(codec.encode(b"SUB t c\n"))
    before = len(recorder.writes)
    wait_until(lambda: len(recorder.writes) >= before + 2)

    def close() -> list[bytes]:
        client.close()
        return recorder.writes

    return recorder.writes, close


@pytest.mark.parametrize("kind", ["snappy", "deflate"])
def test_session_upgrade_writes_match_nsqd(make_broker: Callable[..., Broker], kind: str) -> None:
    broker = make_broker()
    writes, close = _session_writes(broker, kind)
    wait_until(lambda: len(writes) >= (4 if kind == "snappy" else 7))
    writes = close()
    identify_response = writes[0]
    assert identify_response[8:9] == b"{"  # the plain JSON response, alone
    if kind == "snappy":
        assert writes[1:5] == NSQD_SNAPPY_FIRST_OK + NSQD_SNAPPY_NEXT_OK
    else:
        # IDENTIFY: OK + trailer, empty flush; SUB: OK + trailer, empty flush
        assert [w == SYNC_TRAILER for w in writes[1:9]] == [False, True] * 4
        assert writes[3:5] == NSQD_DEFLATE_EMPTY_FLUSH == writes[7:9]
        decoded = DeflateCodec().decode(b"".join(writes[1:9]))
        assert decoded == response_frame(OK) * 2
