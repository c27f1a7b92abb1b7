"""A publisher's answers resolved without decoding frames (ClientConnection.publish_answers)."""

from __future__ import annotations

import json

import pytest

from gnsqlite.protocol import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_RESPONSE,
    ClientConnection,
    ErrorReceived,
    Heartbeat,
    Identified,
    Response,
    commands,
    encode_frame,
)

pytestmark = pytest.mark.no_server

OK_FRAME = encode_frame(FRAME_TYPE_RESPONSE, b"OK")


def ready(publishes: int) -> tuple[ClientConnection, list[str]]:
    """A connection past IDENTIFY with ``publishes`` PUBs waiting, each with a named waiter."""
    conn = ClientConnection()
    conn.start({"feature_negotiation": True})
    conn.receive_data(encode_frame(FRAME_TYPE_RESPONSE, json.dumps({}).encode()))
    assert isinstance(conn.events()[0], Identified)
    waiters = [f"w{i}" for i in range(publishes)]
    for waiter in waiters:
        conn.publish_encoded("PUB", commands.pub("t", b"x"), waiter)
    return conn, waiters


def test_only_ok_answers_give_their_waiters_in_order_and_take_them_off_the_queue() -> None:
    conn, waiters = ready(3)
    assert conn.publish_answers(OK_FRAME) == waiters[:1]
    assert conn.publish_answers(OK_FRAME * 2) == waiters[1:]
    assert conn.awaited_answers == 0


def test_anything_more_than_ok_answers_takes_nothing_and_decodes_as_before() -> None:
    heartbeat = encode_frame(FRAME_TYPE_RESPONSE, b"_heartbeat_")
    refused = encode_frame(FRAME_TYPE_ERROR, b"E_BAD_TOPIC bad")
    cases = [
        OK_FRAME + heartbeat,  # a heartbeat among the answers
        OK_FRAME[:5],  # part of a frame
        OK_FRAME * 3,  # more answers than requests
        refused,  # an error frame
        b"",  # nsqd hung up: not this method's business
    ]
    for data in cases:
        conn, _ = ready(2)
        assert conn.publish_answers(data) is None
        assert conn.awaited_answers == 2
    conn, _ = ready(2)
    assert conn.publish_answers(OK_FRAME + heartbeat) is None
    conn.receive_data(OK_FRAME + heartbeat)
    events = conn.events()
    assert isinstance(events[0], Response) and events[0].waiter == "w0"
    assert isinstance(events[1], Heartbeat)
    conn, _ = ready(1)
    conn.receive_data(refused)
    assert isinstance(conn.events()[0], ErrorReceived)


def test_a_partial_frame_buffered_keeps_later_bytes_on_the_decoder() -> None:
    # The rest of a frame that began in an earlier read must not be read as whole OKs.
    conn, _ = ready(2)
    conn.receive_data(OK_FRAME[:4])
    assert conn.events() == []
    assert conn.publish_answers(OK_FRAME[4:] + OK_FRAME[:4]) is None
    assert conn.publish_answers(OK_FRAME) is None  # bytes are still buffered
    conn.receive_data(OK_FRAME[4:] + OK_FRAME)
    assert [e.waiter for e in conn.events()] == ["w0", "w1"]  # type: ignore[attr-defined]


def test_a_subscribed_connection_decodes_its_answers_as_before() -> None:
    conn, _ = ready(0)
    conn.sub("t", "c")
    conn.receive_data(OK_FRAME)
    assert [e.command for e in conn.events()] == ["SUB"]  # type: ignore[attr-defined]
    conn.publish_encoded("PUB", commands.pub("t", b"x"), "w")
    assert conn.publish_answers(OK_FRAME) is None
    assert conn.awaited_answers == 1
