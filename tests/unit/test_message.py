"""A Message reports each answer once, on its own path of the responder."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gnsqlite.message import Message, deliver, finish_all
from gnsqlite.protocol import WireMessage
from gnsqlite.protocol.frames import decode_message, encode_message

pytestmark = pytest.mark.no_server


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def on_finish(self, message: Message) -> None:
        self.calls.append(("finish", message.id))

    def on_requeue(self, message: Message, delay: float | None, backoff: bool) -> None:
        self.calls.append(("requeue", message.id, delay, backoff))

    def on_touch(self, message: Message) -> None:
        self.calls.append(("touch", message.id))


def make(responder: Any, n: int = 0) -> Message:
    return Message(f"{n:016d}", b"x", 0, 1, "127.0.0.1:4150", responder, 60.0)


def test_each_answer_takes_its_own_path_and_only_the_first_counts() -> None:
    r = Recorder()
    a, b = make(r, 1), make(r, 2)
    assert a.touch() and a.finish()
    assert not a.finish() and not a.requeue() and not a.touch()
    assert b.requeue(2.5, backoff=False)
    assert not b.finish()
    assert r.calls == [
        ("touch", "0000000000000001"),
        ("finish", "0000000000000001"),
        ("requeue", "0000000000000002", 2.5, False),
    ]


def test_a_responder_with_the_older_single_respond_method_still_works() -> None:
    calls: list[tuple[Any, ...]] = []

    class Old:
        def respond(self, message: Message, action: str, delay: Any, backoff: bool) -> None:
            calls.append((action, delay, backoff))

    m, n = make(Old(), 1), make(Old(), 2)
    assert m.touch() and m.finish() and n.requeue()
    assert calls == [("touch", None, False), ("finish", None, False), ("requeue", None, True)]


def test_a_decoded_and_delivered_message_is_the_message_the_constructor_builds() -> None:
    r = Recorder()
    conn = object()
    now = time.monotonic()
    built = Message(b"0000000000000007", b"body", 123, 2, "h:4150", r, 30.0, connection=conn)
    # As a consumer's connection makes it: decoded into the class, then completed.
    frame = encode_message(WireMessage(b"0000000000000007", b"body", 123, 2))
    fast = decode_message(frame, Message)
    deliver(fast, "h:4150", r, 30.0, conn, now)
    for field in (
        "id",
        "wire_id",
        "body",
        "timestamp",
        "attempts",
        "nsqd",
        "msg_timeout",
        "connection",
        "has_responded",
        "is_async",
    ):
        assert getattr(fast, field) == getattr(built, field), field
    assert 29.0 < fast.time_left() <= 30.0
    assert fast.finish() and not fast.finish()
    assert r.calls == [("finish", "0000000000000007")]


class BulkRecorder(Recorder):
    def on_finish_many(self, messages: list[Message]) -> None:
        self.calls.append(("finish_many", [m.id for m in messages]))


class Lost:
    closed = True


def test_finish_all_hands_each_responder_its_messages_in_one_call() -> None:
    bulk, single = BulkRecorder(), Recorder()
    a, b, c, d = make(bulk, 1), make(single, 2), make(bulk, 3), make(single, 4)
    answered, lost = make(bulk, 5), make(bulk, 6)
    assert answered.finish()
    lost.connection = Lost()
    assert finish_all([a, b, c, d, answered, lost]) == 4
    assert bulk.calls == [
        ("finish", "0000000000000005"),
        ("finish_many", ["0000000000000001", "0000000000000003"]),
    ]
    assert single.calls == [("finish", "0000000000000002"), ("finish", "0000000000000004")]
    # Answered once, as by finish(): every one of them says so now.
    assert all(m.has_responded for m in (a, b, c, d, lost))
    assert not a.finish() and not lost.requeue() and finish_all([a, b]) == 0
