"""Byte-level transcripts against the embedded broker: exact error frames, and
whether nsqd closes the connection after each (as nsqd v1.x does)."""

from __future__ import annotations

import struct

import pytest
from nsqd_raw import RawClient

from gnsqlite.broker import Broker

pytestmark = pytest.mark.embedded_only


def raw(broker: Broker, **kw: object) -> RawClient:
    assert broker.tcp_address is not None
    return RawClient(broker.tcp_address, **kw)  # type: ignore[arg-type]


def test_bad_magic_gets_e_bad_protocol_and_close(broker: Broker) -> None:
    with raw(broker, magic=False) as c:
        c.send(b"  V1")
        assert c.error() == b"E_BAD_PROTOCOL"
        c.assert_closed()


def test_identify_without_negotiation_answers_ok(broker: Broker) -> None:
    with raw(broker) as c:
        assert c.identify(client_id="x") == b"OK"


def test_identify_negotiation_answers_nsqd_fields(broker: Broker) -> None:
    with raw(broker) as c:
        answer = c.negotiate(msg_timeout=2000)
        assert list(answer) == [
            "max_rdy_count",
            "version",
            "max_msg_timeout",
            "msg_timeout",
            "tls_v1",
            "deflate",
            "deflate_level",
            "max_deflate_level",
            "snappy",
            "sample_rate",
            "auth_required",
            "output_buffer_size",
            "output_buffer_timeout",
        ]
        assert answer["msg_timeout"] == 2000
        assert answer["max_rdy_count"] == 2500
        assert answer["auth_required"] is False
        assert answer["tls_v1"] is False


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"heartbeat_interval": 500}, b"E_BAD_BODY IDENTIFY heartbeat interval (500) is invalid"),
        (
            {"heartbeat_interval": 61000},
            b"E_BAD_BODY IDENTIFY heartbeat interval (61000) is invalid",
        ),
        ({"msg_timeout": 999}, b"E_BAD_BODY IDENTIFY msg timeout (999) is invalid"),
        ({"sample_rate": 100}, b"E_BAD_BODY IDENTIFY sample rate (100) is invalid"),
        ({"output_buffer_size": 10}, b"E_BAD_BODY IDENTIFY output buffer size (10) is invalid"),
        (
            {"output_buffer_timeout": 1},
            b"E_BAD_BODY IDENTIFY output buffer timeout (1) is invalid",
        ),
    ],
)
def test_identify_out_of_range_is_fatal_bad_body(
    broker: Broker, fields: dict[str, int], text: bytes
) -> None:
    with raw(broker) as c:
        c.command(b"IDENTIFY", repr(fields).replace("'", '"').encode())
        assert c.error() == text
        c.assert_closed()


def test_identify_bad_json(broker: Broker) -> None:
    with raw(broker) as c:
        c.command(b"IDENTIFY", b"{nope")
        assert c.error() == b"E_BAD_BODY IDENTIFY failed to decode JSON body"
        c.assert_closed()


def test_identify_body_too_big_refused_before_reading_it(make_broker: object) -> None:
    broker = make_broker(max_body_size=1024 * 1024, max_msg_size=1024)  # type: ignore[operator]
    with raw(broker) as c:
        c.send(b"IDENTIFY\n" + struct.pack(">i", 2_000_000_000))
        assert c.error() == b"E_BAD_BODY IDENTIFY body too big 2000000000 > 1048576"
        c.assert_closed()


def test_unknown_command_is_fatal_e_invalid(broker: Broker) -> None:
    with raw(broker) as c:
        c.command(b"HELLO there")
        assert c.error() == b"E_INVALID invalid command HELLO"
        c.assert_closed()


def test_pub_before_identify_is_fine(broker: Broker) -> None:
    with raw(broker) as c:
        c.pub("t", b"hi")
        c.command(b"NOP")
        c.pub("t", b"again")


def test_pub_invalid_topic(broker: Broker) -> None:
    with raw(broker) as c:
        c.command(b"PUB bad!topic", b"x")
        assert c.error() == b'E_BAD_TOPIC PUB topic name "bad!topic" is not valid'
        c.assert_closed()


def test_pub_missing_topic(broker: Broker) -> None:
    with raw(broker) as c:
        c.command(b"PUB")
        assert c.error() == b"E_INVALID PUB insufficient number of parameters"
        c.assert_closed()


def test_pub_empty_body(broker: Broker) -> None:
    with raw(broker) as c:
        c.command(b"PUB t", b"")
        assert c.error() == b"E_BAD_MESSAGE PUB invalid message body size 0"
        c.assert_closed()


def test_pub_too_big_refused_before_reading_it(make_broker: object) -> None:
    broker = make_broker(max_msg_size=100)  # type: ignore[operator]
    with raw(broker) as c:
        c.send(b"PUB t\n" + struct.pack(">i", 101))
        assert c.error() == b"E_BAD_MESSAGE PUB message too big 101 > 100"
        c.assert_closed()


def test_mpub_invalid_topic_repeats_the_code_like_nsqd(broker: Broker) -> None:
    with raw(broker) as c:
        c.command(b"MPUB a*b", b"\x00\x00\x00\x01\x00\x00\x00\x01x")
        assert c.error() == b'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "a*b" is not valid'
        c.assert_closed()


@pytest.mark.parametrize(
    ("body", "text"),
    [
        (struct.pack(">i", 0), b"E_BAD_BODY MPUB invalid message count 0"),
        (struct.pack(">i", -3), b"E_BAD_BODY MPUB invalid message count -3"),
        (
            struct.pack(">ii", 1, 0),
            b"E_BAD_MESSAGE MPUB invalid message(0) body size 0",
        ),
    ],
)
def test_mpub_count_and_size_problems(broker: Broker, body: bytes, text: bytes) -> None:
    with raw(broker) as c:
        c.command(b"MPUB t", body)
        assert c.error() == text
        c.assert_closed()


def test_mpub_reads_its_messages_from_the_stream_like_nsqd(broker: Broker) -> None:
    """A body shorter than declared waits for more bytes; bytes after it are commands."""
    with raw(broker) as c:
        c.command(b"MPUB t", struct.pack(">ii", 2, 1) + b"x")  # the second message is missing
        c.send(struct.pack(">i", 2) + b"yz" + b"PUB t\n" + struct.pack(">i", 1) + b"w")
        assert c.response() == b"OK"  # MPUB
        assert c.response() == b"OK"  # the PUB that followed its messages
    assert broker.topics["t"].message_count == 3


def test_mpub_message_too_big(make_broker: object) -> None:
    broker = make_broker(max_msg_size=10)  # type: ignore[operator]
    with raw(broker) as c:
        c.command(b"MPUB t", struct.pack(">ii", 1, 11) + b"x" * 11)
        assert c.error() == b"E_BAD_MESSAGE MPUB message too big 11 > 10"
        c.assert_closed()


def test_mpub_body_too_big(make_broker: object) -> None:
    broker = make_broker(max_msg_size=10, max_body_size=100)  # type: ignore[operator]
    with raw(broker) as c:
        c.send(b"MPUB t\n" + struct.pack(">i", 101))
        assert c.error() == b"E_BAD_BODY MPUB body too big 101 > 100"
        c.assert_closed()


def test_dpub_out_of_range_is_fatal(make_broker: object) -> None:
    broker = make_broker(max_req_timeout=10.0)  # type: ignore[operator]
    with raw(broker) as c:
        c.command(b"DPUB t 10001", b"x")
        assert c.error() == b"E_INVALID DPUB timeout 10001 out of range 0-10000"
        c.assert_closed()


def test_dpub_unparsable_timeout(broker: Broker) -> None:
    with raw(broker) as c:
        c.command(b"DPUB t -5", b"x")
        assert c.error() == b"E_INVALID DPUB could not parse timeout -5"
        c.assert_closed()


def test_sub_invalid_names(broker: Broker) -> None:
    with raw(broker) as c:
        c.command(b"SUB t bad/channel")
        assert c.error() == b'E_BAD_CHANNEL SUB channel name "bad/channel" is not valid'
        c.assert_closed()
    with raw(broker) as c:
        c.command(b"SUB " + b"x" * 65 + b" ch")
        assert c.error().startswith(b"E_BAD_TOPIC SUB topic name ")
        c.assert_closed()


def test_sub_with_heartbeats_disabled_is_refused(broker: Broker) -> None:
    with raw(broker) as c:
        assert c.identify(heartbeat_interval=-1) == b"OK"
        c.command(b"SUB t ch")
        assert c.error() == b"E_INVALID cannot SUB with heartbeats disabled"
        c.assert_closed()


def test_second_sub_is_fatal(broker: Broker) -> None:
    with raw(broker) as c:
        c.sub("t", "ch")
        c.command(b"SUB t ch2")
        assert c.error() == b"E_INVALID cannot SUB in current state"
        c.assert_closed()


def test_rdy_before_sub_is_fatal(broker: Broker) -> None:
    with raw(broker) as c:
        c.rdy(1)
        assert c.error() == b"E_INVALID cannot RDY in current state"
        c.assert_closed()


def test_rdy_above_max_is_fatal(make_broker: object) -> None:
    broker = make_broker(max_rdy_count=50)  # type: ignore[operator]
    with raw(broker) as c:
        c.sub("t", "ch")
        c.rdy(51)
        assert c.error() == b"E_INVALID RDY count 51 out of range 0-50"
        c.assert_closed()


def test_rdy_negative_cannot_be_parsed(broker: Broker) -> None:
    with raw(broker) as c:
        c.sub("t", "ch")
        c.command(b"RDY -1")
        assert c.error() == b"E_INVALID RDY could not parse count -1"
        c.assert_closed()


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"FIN 0123456789abcdef", b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight"),
        (
            b"REQ 0123456789abcdef 0",
            b"E_REQ_FAILED REQ 0123456789abcdef failed ID not in flight",
        ),
        (
            b"TOUCH 0123456789abcdef",
            b"E_TOUCH_FAILED TOUCH 0123456789abcdef failed ID not in flight",
        ),
    ],
)
def test_fin_req_touch_of_unknown_id_are_not_fatal(
    broker: Broker, line: bytes, code: bytes
) -> None:
    with raw(broker) as c:
        c.sub("t", "ch")
        c.command(line)
        assert c.error() == code
        # the connection stays up and keeps working
        c.rdy(1)
        with raw(broker) as p:
            p.pub("t", b"after")
        assert c.message().body == b"after"


def test_fin_of_another_clients_message_is_not_fatal(broker: Broker) -> None:
    with raw(broker) as a, raw(broker) as b, raw(broker) as p:
        a.sub("t", "ch", rdy=1)
        b.sub("t", "ch")
        p.pub("t", b"one")
        msg = a.message()
        b.fin(msg.id)
        assert b.error() == b"E_FIN_FAILED FIN %s failed client does not own message" % msg.id
        a.fin(msg.id)
        a.assert_silent(0.2)


def test_fin_with_malformed_id_is_fatal(broker: Broker) -> None:
    with raw(broker) as c:
        c.sub("t", "ch")
        c.command(b"FIN short")
        assert c.error() == b"E_INVALID invalid message ID"
        c.assert_closed()


def test_fin_before_sub_is_fatal(broker: Broker) -> None:
    with raw(broker) as c:
        c.command(b"FIN 0123456789abcdef")
        assert c.error() == b"E_INVALID cannot FIN in current state"
        c.assert_closed()


def test_cls_answers_close_wait_and_ignores_later_rdy(broker: Broker) -> None:
    with raw(broker) as c:
        c.sub("t", "ch")
        c.command(b"CLS")
        assert c.response() == b"CLOSE_WAIT"
        c.rdy(5)  # ignored after CLS, not an error
        with raw(broker) as p:
            p.pub("t", b"x")
        c.assert_silent(0.2)


def test_cls_before_sub_is_fatal(broker: Broker) -> None:
    with raw(broker) as c:
        c.command(b"CLS")
        assert c.error() == b"E_INVALID cannot CLS in current state"
        c.assert_closed()


def test_line_too_long_closes_without_a_frame(broker: Broker) -> None:
    with raw(broker) as c:
        c.send(b"X" * (17 * 1024))
        c.assert_closed()


def test_commands_split_across_packets_and_pipelined(broker: Broker) -> None:
    with raw(broker) as c:
        data = b"PUB t\n" + struct.pack(">i", 5) + b"hello" + b"NOP\n" + b"PUB t\n"
        data += struct.pack(">i", 3) + b"abc"
        for i in range(len(data)):
            c.send(data[i : i + 1])
        assert c.response() == b"OK"
        assert c.response() == b"OK"
    assert broker.topics["t"].message_count == 2


def test_crlf_line_endings_are_accepted(broker: Broker) -> None:
    with raw(broker) as c:
        c.send(b"SUB t ch\r\n")
        assert c.response() == b"OK"


def test_one_bad_client_does_not_disturb_others(broker: Broker) -> None:
    with raw(broker) as good, raw(broker) as bad:
        good.sub("t", "ch", rdy=1)
        bad.send(b"GARBAGE\n")
        assert bad.error().startswith(b"E_INVALID")
        with raw(broker) as p:
            p.pub("t", b"still here")
        assert good.message().body == b"still here"
