"""Inputs the fuzz targets turned up or that their rules name, as plain tests."""

from __future__ import annotations

import struct
import zlib

import pytest

from gnsqlite.codecs import DeflateCodec
from gnsqlite.errors import BadBodyError, RemoteProtocolError
from gnsqlite.protocol.client import ClientConnection
from gnsqlite.protocol.frames import FRAME_TYPE_RESPONSE, FrameDecoder, encode_frame
from gnsqlite.protocol.server import CommandParser, IdentifyLimits, negotiate_identify

pytestmark = pytest.mark.no_server
DEEP = b"[" * 100_000  # deeper than Python's recursion limit: json.loads raised RecursionError


def test_identify_json_nested_too_deep_is_a_bad_body() -> None:
    with pytest.raises(BadBodyError, match="IDENTIFY failed to decode JSON body"):
        negotiate_identify(DEEP, IdentifyLimits(version="1.3.0"))


@pytest.mark.parametrize("answer", ["IDENTIFY", "AUTH"])
def test_a_reply_nested_too_deep_is_a_remote_protocol_error(answer: str) -> None:
    machine = ClientConnection()
    machine.start({"feature_negotiation": True})
    if answer == "AUTH":
        machine.receive_data(encode_frame(FRAME_TYPE_RESPONSE, b'{"auth_required":true}'))
        machine.events()
        machine.auth(b"secret")
    machine.receive_data(encode_frame(FRAME_TYPE_RESPONSE, DEEP))
    with pytest.raises(RemoteProtocolError, match="JSON"):
        machine.events()


def test_a_2gib_frame_claim_is_refused_at_the_header() -> None:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">ii", 0x7FFFFFFF, FRAME_TYPE_RESPONSE))  # 8 bytes, no data
    with pytest.raises(RemoteProtocolError, match="exceeds the maximum"):
        decoder.next_frame()


def test_an_mpub_claiming_2gib_is_refused_before_its_body() -> None:
    parser = CommandParser()
    parser.feed(b"  V2MPUB t\n" + struct.pack(">i", 0x7FFFFFFF))
    assert parser.next_command() is not None  # MpubStart: nsqd checks AUTH first
    with pytest.raises(BadBodyError, match="MPUB body too big"):
        parser.next_command()


def test_an_mpub_message_claiming_2gib_is_refused_before_its_bytes() -> None:
    parser = CommandParser()
    parser.feed(b"  V2MPUB t\n" + struct.pack(">iii", 100, 2, 0x7FFFFFFF))
    parser.next_command()
    with pytest.raises(Exception, match="MPUB message too big"):
        parser.next_command()


def test_a_deflate_bomb_inflates_only_as_far_as_asked() -> None:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    bomb = compressor.compress(b"\0" * (32 * 1024 * 1024)) + compressor.flush(zlib.Z_SYNC_FLUSH)
    codec = DeflateCodec()
    first = codec.decode(bomb, 65536)
    assert len(first) == 65536 and codec.pending
    total = len(first)
    while codec.pending:
        total += len(codec.decode(b"", 65536))
    assert total == 32 * 1024 * 1024
