"""The pure server side of the protocol: parser, IDENTIFY negotiation, MPUB split."""

from __future__ import annotations

import itertools
import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gnsqlite.errors import RemoteProtocolError, ServerError
from gnsqlite.protocol import decode_message, dpub, fin, identify, mpub, nop, pub, rdy, req, sub
from gnsqlite.protocol.server import (
    STATE_SUBSCRIBED,
    CommandParser,
    Dpub,
    Fin,
    Identify,
    IdentifyLimits,
    Mpub,
    MpubStart,
    Nop,
    Pub,
    Rdy,
    Req,
    Sub,
    error_frame,
    go_quote,
    message_frame,
    negotiate_identify,
    split_mpub,
)

pytestmark = pytest.mark.embedded_only

ID = b"0123456789abcdef"


def parse_all(parser: CommandParser) -> list[object]:
    out: list[object] = []
    while (command := parser.next_command()) is not None:
        out.append(command)
        if isinstance(command, Sub):
            parser.state = STATE_SUBSCRIBED
    return out


STREAM = b"".join(
    [
        b"  V2",
        identify({"client_id": "x"}),
        pub("t", b"hello"),
        mpub("t", [b"a", b"bc"]),
        dpub("t", 1.5, b"later"),
        nop(),
        sub("t", "ch"),
        rdy(7),
        fin(ID),
        req(ID, 2.0),
    ]
)
EXPECTED = [
    Identify(b'{"client_id":"x"}'),
    Pub("t", b"hello"),
    MpubStart("t"),
    Mpub("t", [b"a", b"bc"]),
    Dpub("t", 1500, b"later"),
    Nop(),
    Sub("t", "ch"),
    Rdy(7),
    Fin(ID),
    Req(ID, 2000),
]


def test_a_whole_stream_parses() -> None:
    parser = CommandParser()
    parser.feed(STREAM)
    assert parse_all(parser) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=20))
def test_any_split_gives_the_same_commands(cuts: list[int]) -> None:
    parser = CommandParser()
    got: list[object] = []
    points = [0, *sorted(cuts), len(STREAM)]
    for start, end in itertools.pairwise(points):
        parser.feed(STREAM[start:end])
        got.extend(parse_all(parser))
    assert got == EXPECTED


def test_body_size_is_checked_before_the_body_arrives() -> None:
    parser = CommandParser(max_msg_size=10)
    parser.feed(b"  V2PUB t\n" + struct.pack(">i", 11))
    with pytest.raises(ServerError) as info:
        parser.next_command()
    assert (info.value.code, info.value.text, info.value.fatal) == (
        "E_BAD_MESSAGE",
        "PUB message too big 11 > 10",
        True,
    )


def test_long_line_is_a_remote_protocol_error() -> None:
    parser = CommandParser()
    parser.feed(b"  V2" + b"x" * 20000)
    with pytest.raises(RemoteProtocolError):
        parser.next_command()


def test_req_timeout_is_clamped() -> None:
    parser = CommandParser(max_req_timeout_ms=1000)
    parser.state = STATE_SUBSCRIBED
    parser.feed(b"  V2REQ " + ID + b" 5000\n")
    assert parser.next_command() == Req(ID, 1000)


def test_tls_pending_refuses_everything_but_identify() -> None:
    parser = CommandParser()
    parser.tls_pending = True
    parser.feed(b"  V2NOP\n")
    with pytest.raises(ServerError, match="cannot NOP in current state \\(TLS required\\)"):
        parser.next_command()
    parser = CommandParser()
    parser.tls_pending = True
    parser.feed(b"  V2" + identify({}))
    assert isinstance(parser.next_command(), Identify)


def test_take_unprocessed_returns_bytes_after_the_last_command() -> None:
    parser = CommandParser()
    parser.feed(b"  V2" + nop() + b"\x01\x02")
    assert parser.next_command() == Nop()
    assert parser.take_unprocessed() == b"\x01\x02"


LIMITS = IdentifyLimits(version="1.3.0", tls=True)


def test_negotiate_defaults_and_answer() -> None:
    neg = negotiate_identify(b'{"feature_negotiation": true}', LIMITS)
    assert neg.heartbeat_interval_ms == 30000
    assert neg.msg_timeout_ms == 60000
    answer = json.loads(neg.response)
    assert answer["version"] == "1.3.0"
    assert answer["output_buffer_size"] == 16384
    assert answer["output_buffer_timeout"] == 250


def test_negotiate_without_feature_negotiation_answers_ok() -> None:
    neg = negotiate_identify(b'{"tls_v1": true, "snappy": true}', LIMITS)
    assert neg.response == b"OK"
    assert (neg.tls, neg.snappy) == (False, False)


def test_negotiate_disables_heartbeats_and_buffering() -> None:
    body = b'{"heartbeat_interval": -1, "output_buffer_size": -1, "output_buffer_timeout": 100}'
    neg = negotiate_identify(body, LIMITS)
    assert neg.heartbeat_interval_ms == 0
    assert (neg.output_buffer_size, neg.output_buffer_timeout_ms) == (1, 0)


@pytest.mark.parametrize(
    "body",
    [b"[]", b'{"heartbeat_interval": "1000"}', b'{"snappy": 1}', b'{"client_id": 5}', b"\xff"],
)
def test_negotiate_refuses_malformed_json(body: bytes) -> None:
    with pytest.raises(ServerError, match="IDENTIFY failed to decode JSON body"):
        negotiate_identify(body, LIMITS)


def test_split_mpub() -> None:
    body = mpub("t", [b"a", b"bc"])[len(b"MPUB t\n") + 4 :]
    assert split_mpub(body, 100, 1000) == [b"a", b"bc"]
    assert split_mpub(body + b"x", 100, 1000) == [b"a", b"bc"]  # nsqd's HTTP ignores the rest
    with pytest.raises(ServerError, match="MPUB failed to read message body"):
        split_mpub(body[:-1], 100, 1000)
    with pytest.raises(ServerError, match="MPUB invalid message count 1"):
        split_mpub(body[:3] + b"\x01" + body[4:], 100, 8)


def test_frames() -> None:
    data = message_frame(ID, b"body", 123, 4)
    assert struct.unpack(">ii", data[:8]) == (len(data) - 4, 2)
    message = decode_message(data[8:])
    assert (message.id, message.body, message.timestamp, message.attempts) == (ID, b"body", 123, 4)
    error = ServerError("boom", code="E_INVALID")
    assert error_frame(error) == struct.pack(">ii", 4 + 14, 1) + b"E_INVALID boom"


def test_go_quote() -> None:
    assert go_quote(b'a"b\\c\n\x01') == '"a\\"b\\\\c\\n\\x01"'
