"""The sans-IO client state machine, fed with bytes as nsqd would send them."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

import pytest

from gnsqlite.errors import (
    BadTopicError,
    FinFailedError,
    LocalProtocolError,
    NegotiationError,
    RemoteProtocolError,
)
from gnsqlite.protocol import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    Authenticated,
    ClientConnection,
    ClientState,
    CloseWait,
    Delivery,
    ErrorReceived,
    Heartbeat,
    Identified,
    MessageReceived,
    Response,
    Upgraded,
    WireMessage,
    encode_frame,
    encode_message,
)

pytestmark = pytest.mark.no_server

MID = b"0123456789abcdef"


def response(data: bytes) -> bytes:
    return encode_frame(FRAME_TYPE_RESPONSE, data)


def error(data: bytes) -> bytes:
    return encode_frame(FRAME_TYPE_ERROR, data)


def message(body: bytes = b"hi", attempts: int = 1) -> bytes:
    return encode_frame(FRAME_TYPE_MESSAGE, encode_message(WireMessage(MID, body, 5, attempts)))


def identified(
    features: dict[str, object] | None = None,
    message_class: type[Delivery] | type[bytes] | None = None,
    **requested: object,
) -> ClientConnection:
    conn = ClientConnection(message_class=message_class)
    sent = conn.start({"feature_negotiation": True, **requested})
    assert sent.startswith(b"  V2IDENTIFY\n")
    conn.receive_data(response(json.dumps(features).encode() if features is not None else b"OK"))
    events = conn.events()
    assert isinstance(events[0], Identified)
    return conn


def subscribed(message_class: type[Delivery] | type[bytes] | None = None) -> ClientConnection:
    conn = identified({"max_rdy_count": 2500}, message_class)
    conn.sub("t", "c")
    conn.receive_data(response(b"OK"))
    assert conn.events() == [Response(b"OK", "SUB")]
    assert conn.state is ClientState.SUBSCRIBED
    return conn


def test_plain_ok_reply_assumes_max_rdy_2500() -> None:
    conn = ClientConnection()
    conn.start({})
    conn.receive_data(response(b"OK"))
    (event,) = conn.events()
    assert event == Identified({"max_rdy_count": 2500}, (), False)
    assert conn.state is ClientState.READY


def test_negotiated_reply_is_kept() -> None:
    conn = identified({"max_rdy_count": 100, "msg_timeout": 60000})
    assert conn.features["max_rdy_count"] == 100
    assert conn.state is ClientState.READY


def test_heartbeat_queues_a_nop_by_itself() -> None:
    conn = subscribed()
    conn.receive_data(response(b"_heartbeat_") + message())
    events = conn.events()
    assert events[0] == Heartbeat()
    assert isinstance(events[1], MessageReceived)
    assert events[1].message.body == b"hi"
    assert conn.data_to_send() == b"NOP\n"
    assert conn.data_to_send() == b""


def test_heartbeat_during_handshake_is_answered_too() -> None:
    conn = ClientConnection()
    conn.start({})
    conn.receive_data(response(b"_heartbeat_") + response(b"OK"))
    events = conn.events()
    assert events[0] == Heartbeat()
    assert isinstance(events[1], Identified)
    assert conn.data_to_send() == b"NOP\n"


def state_of(conn: ClientConnection) -> ClientState:
    """``conn.state`` read anew (mypy keeps an earlier ``assert conn.state is ...`` otherwise)."""
    return conn.state


def test_commands_out_of_order_are_refused_locally() -> None:
    conn = ClientConnection()
    sends: tuple[Callable[[], bytes], ...] = (
        lambda: conn.sub("t", "c"),
        lambda: conn.pub("t", b"x"),
        lambda: conn.rdy(1),
    )
    for send in sends:
        with pytest.raises(LocalProtocolError, match="state 'init'"):
            send()
    conn = identified({})
    with pytest.raises(LocalProtocolError, match="cannot send RDY"):
        conn.rdy(1)
    with pytest.raises(LocalProtocolError, match="cannot send FIN"):
        conn.fin(MID)
    with pytest.raises(LocalProtocolError, match="did not ask for AUTH"):
        conn.auth(b"secret")
    conn.sub("t", "c")
    with pytest.raises(LocalProtocolError, match="already subscribed"):
        conn.sub("t", "c")


def test_publish_answers_are_matched_in_order() -> None:
    conn = identified({})
    conn.pub("t", b"1")
    conn.mpub("t", [b"2", b"3"])
    conn.dpub("t", 1.0, b"4")
    assert conn.pending_requests == 3
    conn.receive_data(response(b"OK") * 2 + error(b"E_BAD_MESSAGE DPUB message too big"))
    events = conn.events()
    assert events[:2] == [Response(b"OK", "PUB"), Response(b"OK", "MPUB")]
    assert isinstance(events[2], ErrorReceived)
    assert events[2].command == "DPUB"
    assert events[2].error.code == "E_BAD_MESSAGE"
    assert events[2].error.fatal
    assert conn.state is ClientState.CLOSED


def test_non_fatal_errors_answer_no_request_and_keep_the_connection() -> None:
    conn = subscribed()
    conn.pub("t", b"x")
    conn.receive_data(error(b"E_FIN_FAILED FIN 0123 failed ID not in flight") + response(b"OK"))
    events = conn.events()
    assert isinstance(events[0], ErrorReceived)
    assert isinstance(events[0].error, FinFailedError)
    assert not events[0].error.fatal
    assert events[0].command is None
    assert events[1] == Response(b"OK", "PUB")
    assert conn.state is ClientState.SUBSCRIBED


def test_fatal_error_after_sub() -> None:
    conn = identified({})
    conn.sub("t", "c")
    conn.receive_data(error(b'E_BAD_TOPIC SUB topic name "t" is not valid'))
    (event,) = conn.events()
    assert isinstance(event, ErrorReceived)
    assert isinstance(event.error, BadTopicError)
    assert event.command == "SUB"
    with pytest.raises(LocalProtocolError):
        conn.pub("t", b"x")


def test_cls_then_close_wait_still_allows_fin() -> None:
    conn = subscribed()
    assert conn.cls() == b"CLS\n"
    conn.receive_data(message() + response(b"CLOSE_WAIT"))
    events = conn.events()
    assert isinstance(events[0], MessageReceived)
    assert events[1] == CloseWait()
    assert conn.fin(MID) == b"FIN " + MID + b"\n"
    assert conn.req(MID, 1.0) == b"REQ " + MID + b" 1000\n"


def test_unsolicited_response_is_a_remote_error() -> None:
    conn = subscribed()
    conn.receive_data(response(b"OK"))
    with pytest.raises(RemoteProtocolError, match="nobody asked for"):
        conn.events()


def test_message_before_sub_is_a_remote_error() -> None:
    conn = identified({})
    conn.receive_data(message())
    with pytest.raises(RemoteProtocolError, match="before SUB"):
        conn.events()


def test_bad_identify_reply_is_a_remote_error() -> None:
    conn = ClientConnection()
    conn.start({})
    conn.receive_data(response(b"{not json"))
    with pytest.raises(RemoteProtocolError, match="neither OK nor JSON"):
        conn.events()


def test_tls_requested_but_refused_is_an_error_not_a_fallback() -> None:
    conn = ClientConnection()
    conn.start({"tls_v1": True, "feature_negotiation": True})
    conn.receive_data(response(json.dumps({"tls_v1": False}).encode()))
    with pytest.raises(NegotiationError, match="TLS was required"):
        conn.events()


def test_upgrades_pause_decoding_and_hand_over_the_rest() -> None:
    conn = ClientConnection()
    conn.start({"tls_v1": True, "snappy": True, "feature_negotiation": True})
    features = {"tls_v1": True, "snappy": True, "auth_required": True}
    # The IDENTIFY reply and, in the same read, the first bytes of the TLS stream.
    conn.receive_data(response(json.dumps(features).encode()) + b"\x16\x03\x01TLS...")
    (event,) = conn.events()
    assert event == Identified({**features, "max_rdy_count": 2500}, ("tls", "snappy"), True)
    assert conn.pending_upgrade == "tls"
    assert conn.events() == []  # paused: nothing decoded past the upgrade point
    assert conn.take_unprocessed() == b"\x16\x03\x01TLS..."
    conn.upgrade_started()
    conn.receive_data(response(b"OK"))
    assert conn.events() == [Upgraded("tls")]
    assert conn.pending_upgrade == "snappy"
    conn.upgrade_started()
    conn.receive_data(response(b"OK"))
    assert conn.events() == [Upgraded("snappy")]
    assert conn.state is ClientState.AUTH_REQUIRED
    with pytest.raises(LocalProtocolError, match="cannot send SUB"):
        conn.sub("t", "c")
    assert conn.auth("pw") == b"AUTH\n\x00\x00\x00\x02pw"
    conn.receive_data(response(b'{"identity":"me","permission_count":1}'))
    assert conn.events() == [Authenticated({"identity": "me", "permission_count": 1})]
    assert state_of(conn) is ClientState.READY


def test_compression_refused_by_server_means_no_upgrade() -> None:
    conn = identified({"snappy": False}, snappy=True)
    assert conn.pending_upgrade is None
    assert conn.state is ClientState.READY


def test_upgrade_ok_must_be_ok() -> None:
    conn = ClientConnection()
    conn.start({"deflate": True})
    conn.receive_data(response(b'{"deflate": true}'))
    conn.events()
    conn.upgrade_started()
    conn.receive_data(response(b"NOPE"))
    with pytest.raises(RemoteProtocolError, match="not OK"):
        conn.events()


def test_upgrade_started_without_pending_upgrade() -> None:
    with pytest.raises(LocalProtocolError, match="no upgrade is pending"):
        ClientConnection().upgrade_started()


def test_one_queue_of_pending_answers_carries_each_requests_waiter() -> None:
    conn = subscribed()
    conn.pub("t", b"1")
    conn.await_answer("first")
    conn.pub("t", b"2")  # nobody waits for this one
    conn.mpub("t", [b"3"])
    conn.await_answer("third")
    assert (conn.pending_requests, conn.awaited_answers) == (3, 2)
    conn.receive_data(response(b"OK") * 2)
    events = conn.events()
    assert [(e.command, e.waiter) for e in events if isinstance(e, Response)] == [
        ("PUB", "first"),
        ("PUB", None),
    ]
    conn.cls()  # CLS's answer is the machine's own: it takes no waiter
    with pytest.raises(LocalProtocolError, match="last request is CLS"):
        conn.await_answer("cls")
    assert conn.connection_lost() == ["third"]  # never answered: handed back once
    assert conn.connection_lost() == []


def test_a_refused_request_hands_its_waiter_the_error() -> None:
    conn = identified({})
    with pytest.raises(LocalProtocolError, match="last request is none"):
        conn.await_answer("nobody")
    conn.pub("t", b"1")
    conn.await_answer("w")
    with pytest.raises(LocalProtocolError, match="last request is PUB"):
        conn.await_answer("twice")
    conn.receive_data(error(b"E_BAD_TOPIC PUB topic name is not valid"))
    (event,) = conn.events()
    assert isinstance(event, ErrorReceived)
    assert (event.command, event.waiter) == ("PUB", "w")
    assert isinstance(event.error, BadTopicError)


def test_a_request_built_once_is_recorded_with_its_waiter_on_any_connection() -> None:
    from gnsqlite.protocol import commands

    data = commands.pub("t", b"1")
    first, second = identified({}), identified({})
    assert first.publish_encoded("PUB", data, "w1") is data
    assert second.publish_encoded("MPUB", commands.mpub_encoded("t", b"\0\0\0\1\0\0\0\1x")) != b""
    first.receive_data(response(b"OK"))
    (answer,) = first.events()
    assert isinstance(answer, Response) and (answer.data, answer.waiter) == (b"OK", "w1")
    second.receive_data(response(b"OK"))
    (event,) = second.events()
    assert isinstance(event, Response) and (event.command, event.waiter) == ("MPUB", None)
    with pytest.raises(LocalProtocolError, match="PUB, MPUB or DPUB"):
        first.publish_encoded("SUB", data)
    with pytest.raises(LocalProtocolError, match="cannot send PUB"):
        ClientConnection().publish_encoded("PUB", data)
    assert first.pending_requests == 0  # nothing recorded for a refused one


class Own(Delivery):
    """A receiver's message class: the decoder builds it, the receiver fills in the rest."""

    __slots__ = ("extra",)


def test_a_message_class_makes_each_message_its_own_event() -> None:
    conn = ClientConnection(message_class=Own)
    conn.start({})
    conn.receive_data(response(b"OK"))
    conn.events()
    conn.sub("t", "c")
    conn.receive_data(response(b"OK") + message(b"one", 3) + response(b"_heartbeat_") + message())
    events = conn.events()
    assert events[0] == Response(b"OK", "SUB")
    first, beat, second = events[1:]
    assert type(first) is Own and type(second) is Own
    assert (first.wire_id, first.body, first.timestamp, first.attempts) == (MID, b"one", 5, 3)
    assert second.body == b"hi" and second.attempts == 1
    assert not hasattr(first, "extra")  # built without __init__: the rest is the receiver's
    assert beat == Heartbeat()
    assert conn.data_to_send() == b"NOP\n"


def test_message_class_bytes_makes_each_message_its_frames_data() -> None:
    conn = subscribed(bytes)
    conn.receive_data(message(b"one", 3) + response(b"_heartbeat_") + message())
    events: list[Any] = list(conn.events())  # message_class=bytes: messages are bytes
    first, beat, second = events
    assert type(first) is bytes and type(second) is bytes
    assert first == struct.pack(">qH", 5, 3) + MID + b"one"  # header (big-endian), then body
    assert second[26:] == b"hi"
    assert beat == Heartbeat()
    conn.cls()
    conn.receive_data(message(b"late") + response(b"CLOSE_WAIT"))
    late, closed = list[Any](conn.events())  # outside the subscribed hot path too
    assert late[26:] == b"late" and late[10:26] == MID
    assert closed == CloseWait()


def test_message_class_bytes_still_refuses_a_message_frame_too_short_for_its_header() -> None:
    conn = subscribed(bytes)
    conn.receive_data(struct.pack(">ll", 4 + 20, FRAME_TYPE_MESSAGE) + b"x" * 20)
    with pytest.raises(RemoteProtocolError, match="too short for its 26-byte header"):
        conn.events()


def test_a_subclass_of_bytes_is_refused_as_message_class() -> None:
    class Frame(bytes):
        pass

    with pytest.raises(TypeError, match="bytes itself"):
        ClientConnection(message_class=Frame)


def test_a_message_class_serves_messages_after_cls_too() -> None:
    conn = subscribed(Own)
    conn.cls()
    conn.receive_data(message(b"late") + response(b"CLOSE_WAIT"))
    late, closed = conn.events()  # decoded outside the subscribed hot path
    assert type(late) is Own and late.body == b"late" and late.wire_id == MID
    assert closed == CloseWait()
