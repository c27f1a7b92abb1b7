"""The incremental frame decoder and message decoding."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gnsqlite.errors import RemoteProtocolError
from gnsqlite.protocol import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    FrameDecoder,
    MessageFields,
    WireMessage,
    decode_message,
    encode_frame,
    encode_message,
)

pytestmark = pytest.mark.no_server

MSG = WireMessage(b"0a1b2c3d4e5f6a7b", b"hello", 1_700_000_000_123_456_789, 3)
STREAM_FRAMES = [
    (FRAME_TYPE_RESPONSE, b"OK"),
    (FRAME_TYPE_RESPONSE, b"_heartbeat_"),
    (FRAME_TYPE_MESSAGE, encode_message(MSG)),
    (FRAME_TYPE_ERROR, b"E_INVALID invalid command"),
    (FRAME_TYPE_RESPONSE, b"CLOSE_WAIT"),
    (FRAME_TYPE_MESSAGE, encode_message(WireMessage(b"f" * 16, b"", 0, 65535))),
]
STREAM = b"".join(encode_frame(t, d) for t, d in STREAM_FRAMES)


def test_message_layout_matches_the_spec() -> None:
    data = encode_message(MSG)
    assert data[:8] == struct.pack(">q", MSG.timestamp)  # int64 ns
    assert data[8:10] == struct.pack(">H", 3)  # uint16 attempts
    assert data[10:26] == b"0a1b2c3d4e5f6a7b"  # 16-byte id
    assert data[26:] == b"hello"
    assert decode_message(data) == MSG


def test_frame_layout_size_counts_the_frame_type() -> None:
    assert encode_frame(FRAME_TYPE_RESPONSE, b"OK") == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"


@pytest.mark.parametrize("split", range(len(STREAM) + 1))
def test_decoding_messages_in_the_decoder_gives_what_decode_message_gives(split: int) -> None:
    # The consumer's fast path: message frames come out as bare, equal, frozen,
    # hashable WireMessage values; other frames as (type, bytes), as frames() gives them.
    decoder = FrameDecoder()
    decoder.feed(STREAM[:split])
    got = decoder.frames_decoding_messages()
    decoder.feed(STREAM[split:])
    got += decoder.frames_decoding_messages()
    want = [decode_message(d) if t == FRAME_TYPE_MESSAGE else (t, d) for t, d in STREAM_FRAMES]
    assert got == want
    message = got[2]
    assert isinstance(message, WireMessage) and hash(message) == hash(MSG)
    with pytest.raises(AttributeError):
        message.body = b"changed"  # type: ignore[misc]
    assert decoder.buffered == 0


class Fields(MessageFields):
    __slots__ = ("rest",)


def fields(message: WireMessage) -> tuple[bytes, bytes, int, int]:
    return message.id, message.body, message.timestamp, message.attempts


@pytest.mark.parametrize("split", range(len(STREAM) + 1))
def test_decoding_into_a_class_of_the_receiver_gives_the_same_fields(split: int) -> None:
    # The consumer's one object per message: the decoder builds the receiver's
    # class (without __init__) with the frame's four fields set.
    decoder = FrameDecoder()
    decoder.feed(STREAM[:split])
    got = decoder.frames_decoding_messages(Fields)
    decoder.feed(STREAM[split:])
    got += decoder.frames_decoding_messages(Fields)
    want = [decode_message(d) if t == FRAME_TYPE_MESSAGE else (t, d) for t, d in STREAM_FRAMES]
    assert len(got) == len(want)
    for item, expected in zip(got, want, strict=True):
        if isinstance(expected, WireMessage):
            assert type(item) is Fields and not hasattr(item, "rest")
            assert (item.wire_id, item.body, item.timestamp, item.attempts) == fields(expected)
            assert type(item.body) is bytes
        else:
            assert item == expected
    others: list[int] = []
    decoder.feed(STREAM)
    again = decoder.frames_decoding_messages(Fields, others)
    assert others == [i for i, item in enumerate(again) if type(item) is not Fields]
    assert others == [i for i, (t, _) in enumerate(STREAM_FRAMES) if t != FRAME_TYPE_MESSAGE]
    one = decode_message(encode_message(MSG), Fields)
    assert type(one) is Fields
    assert (one.wire_id, one.body, one.timestamp, one.attempts) == fields(MSG)


def test_decoding_a_large_message_into_a_class_copies_its_body_to_bytes() -> None:
    # A long frame arriving in pieces grows in a bytearray: the body must still be bytes.
    body = b"x" * 20_000
    frame = encode_frame(FRAME_TYPE_MESSAGE, encode_message(WireMessage(b"a" * 16, body, 1, 1)))
    decoder = FrameDecoder()
    decoder.feed(frame[:10_000])
    assert decoder.frames_decoding_messages(Fields) == []
    decoder.feed(frame[10_000:])
    (message,) = decoder.frames_decoding_messages(Fields)
    assert type(message) is Fields and type(message.body) is bytes and message.body == body


@pytest.mark.parametrize("split", range(len(STREAM) + 1))
def test_every_split_point_gives_the_same_frames(split: int) -> None:
    decoder = FrameDecoder()
    decoder.feed(STREAM[:split])
    got = decoder.frames()
    decoder.feed(STREAM[split:])
    got += decoder.frames()
    assert got == STREAM_FRAMES
    assert decoder.buffered == 0


def test_one_byte_at_a_time_with_next_frame() -> None:
    decoder = FrameDecoder()
    got = []
    for i in range(len(STREAM)):
        decoder.feed(STREAM[i : i + 1])
        while (frame := decoder.next_frame()) is not None:
            got.append(frame)
    assert got == STREAM_FRAMES


def test_take_unprocessed_returns_bytes_after_the_last_frame() -> None:
    decoder = FrameDecoder()
    decoder.feed(encode_frame(FRAME_TYPE_RESPONSE, b"OK") + b"\x17\x03\x03rest")
    assert decoder.next_frame() == (FRAME_TYPE_RESPONSE, b"OK")
    assert decoder.take_unprocessed() == b"\x17\x03\x03rest"
    assert decoder.buffered == 0


@given(
    st.lists(
        st.tuples(
            st.sampled_from([FRAME_TYPE_RESPONSE, FRAME_TYPE_ERROR]), st.binary(max_size=300)
        ),
        max_size=20,
    ),
    st.lists(st.integers(min_value=1, max_value=64), min_size=1),
)
def test_frames_round_trip_through_any_chunking(
    frames: list[tuple[int, bytes]], chunks: list[int]
) -> None:
    stream = b"".join(encode_frame(t, d) for t, d in frames)
    decoder = FrameDecoder()
    got: list[tuple[int, bytes]] = []
    pos = i = 0
    while pos < len(stream):
        step = chunks[i % len(chunks)]
        decoder.feed(stream[pos : pos + step])
        got += decoder.frames()
        pos += step
        i += 1
    assert got == frames


@given(
    st.binary(min_size=16, max_size=16),
    st.binary(max_size=2000),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=0, max_value=65535),
)
def test_messages_round_trip(mid: bytes, body: bytes, ts: int, attempts: int) -> None:
    msg = WireMessage(mid, body, ts, attempts)
    assert decode_message(encode_message(msg)) == msg


def raw_frame(size: int, frame_type: int, data: bytes = b"") -> bytes:
    return struct.pack(">ii", size, frame_type) + data


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (raw_frame(2**31 - 1, FRAME_TYPE_MESSAGE), "exceeds the maximum"),
        (raw_frame(4096 + 1, FRAME_TYPE_RESPONSE), "exceeds the maximum"),
        (raw_frame(-5, FRAME_TYPE_RESPONSE), "impossible frame size -5"),
        (raw_frame(3, FRAME_TYPE_RESPONSE), "impossible frame size 3"),
        (raw_frame(6, 7, b"OK"), "unknown frame type 7"),
        (raw_frame(4 + 10, FRAME_TYPE_MESSAGE, b"x" * 10), "too short"),
    ],
)
def test_malformed_frames_raise_before_buffering(data: bytes, error: str) -> None:
    decoder = FrameDecoder(max_frame_size=4096)
    decoder.feed(data)  # only the header: the check must not wait for the body
    with pytest.raises(RemoteProtocolError, match=error):
        decoder.frames()
    decoder2 = FrameDecoder(max_frame_size=4096)
    decoder2.feed(data)
    with pytest.raises(RemoteProtocolError, match=error):
        decoder2.next_frame()


def test_decode_message_refuses_short_data() -> None:
    with pytest.raises(RemoteProtocolError, match="26 bytes of header"):
        decode_message(b"x" * 25)


def test_max_frame_size_must_hold_a_message_header() -> None:
    with pytest.raises(ValueError, match="at least 30"):
        FrameDecoder(max_frame_size=10)


@settings(deadline=None, max_examples=60)
@given(
    st.lists(st.sampled_from([0, 10, 5000, 70_000]), min_size=1, max_size=6),
    st.lists(st.integers(min_value=300, max_value=40_000), min_size=1, max_size=8),
    st.sampled_from([bytes, bytearray, memoryview]),
)
def test_large_frames_in_pieces_decode_whole(
    sizes: list[int], chunks: list[int], kind: type
) -> None:
    # A rest above a few KiB (a large frame arriving in pieces) grows in
    # place; a short one is copied with the new bytes: both give the frames.
    messages = [WireMessage(b"%016d" % i, bytes([i % 251]) * n, i, 1) for i, n in enumerate(sizes)]
    frames = [(FRAME_TYPE_MESSAGE, encode_message(m)) for m in messages]
    frames.insert(len(frames) // 2, (FRAME_TYPE_RESPONSE, b"_heartbeat_"))
    stream = b"".join(encode_frame(t, d) for t, d in frames)
    decoder = FrameDecoder()
    got: list[object] = []
    pos = i = 0
    while pos < len(stream):
        step = chunks[i % len(chunks)]
        decoder.feed(kind(stream[pos : pos + step]))
        got += decoder.frames_decoding_messages()
        pos += step
        i += 1
    want = [decode_message(d) if t == FRAME_TYPE_MESSAGE else (t, d) for t, d in frames]
    assert got == want
    assert all(type(m.body) is bytes for m in got if isinstance(m, WireMessage))
    assert decoder.buffered == 0
