"""The dead-letter envelope: what it carries, and the typed error for anything else."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from gnsqlite.deadletter import ENVELOPE_FORMAT, DeadLetter, HandlerError, decode_envelope
from gnsqlite.errors import EnvelopeError, NSQError
from gnsqlite.message import Message

pytestmark = pytest.mark.no_server


class _Nobody:
    def on_finish(self, message: Message) -> None: ...
    def on_requeue(self, message: Message, delay: float | None, backoff: bool) -> None: ...
    def on_touch(self, message: Message) -> None: ...


LETTER = DeadLetter(
    topic="orders",
    channel="billing",
    id="0a1b2c3d4e5f6789",
    attempts=6,
    timestamp=1_700_000_000_123_456_789,
    nsqd="10.0.0.7:4150",
    dead_lettered_at=1_700_000_100_000_000_000,
    error=HandlerError("KeyError", "'customer' \u00e9"),
    body=b'\x00\xff{"a": 1}\n',
)


def fields(**changes: Any) -> bytes:
    record = LETTER.to_json() | changes
    return json.dumps({k: v for k, v in record.items() if v is not _DROP}).encode()


_DROP = object()


def test_a_message_becomes_an_envelope_and_back() -> None:
    message = Message("0a1b2c3d4e5f6789", b"\xff\x00", 42, 6, "h:4150", _Nobody(), 60.0)
    letter = DeadLetter.of(message, "orders", "billing", HandlerError.of(ValueError("no")))
    assert (letter.id, letter.attempts, letter.timestamp, letter.nsqd, letter.body) == (
        "0a1b2c3d4e5f6789",
        6,
        42,
        "h:4150",
        b"\xff\x00",
    )
    assert letter.error == HandlerError("ValueError", "no")
    assert letter.dead_lettered_at > 42
    assert decode_envelope(letter.encode()) == letter


def test_the_encoding_is_the_documented_json() -> None:
    record = json.loads(LETTER.encode())
    assert record == {
        "format": ENVELOPE_FORMAT,
        "topic": "orders",
        "channel": "billing",
        "id": "0a1b2c3d4e5f6789",
        "attempts": 6,
        "timestamp": 1_700_000_000_123_456_789,
        "nsqd": "10.0.0.7:4150",
        "dead_lettered_at": 1_700_000_100_000_000_000,
        "error": {"type": "KeyError", "message": "'customer' \u00e9"},
        "body": base64.b64encode(b'\x00\xff{"a": 1}\n').decode(),
    }
    assert ENVELOPE_FORMAT == "gnsqlite.dead-letter/1"
    assert decode_envelope(LETTER.encode().decode()) == LETTER  # str is accepted too


def test_no_error_and_unknown_fields_decode() -> None:
    assert decode_envelope(fields(error=None)).error is None
    assert decode_envelope(fields(later_field=[1, 2])) == LETTER


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"plain body", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "a JSON list, not an object"),
        (b"{}", "format None"),
        (fields(format="gnsqlite.dead-letter/2"), "format 'gnsqlite.dead-letter/2'"),
        (fields(topic=_DROP), "without 'topic'"),
        (fields(body=_DROP), "without 'body'"),
        (fields(attempts="6"), "'attempts' must be int, not str"),
        (fields(attempts=True), "'attempts' must be int, not bool"),
        (fields(timestamp=1.5), "'timestamp' must be int, not float"),
        (fields(channel=None), "'channel' must be str, not NoneType"),
        (fields(body="not base64!"), "'body' is not base64"),
        (fields(body="abc"), "'body' is not base64"),
        (fields(error="boom"), "'error' must be null or"),
        (fields(error={"type": "E"}), "'error' must be null or"),
    ],
)
def test_bad_envelopes_raise_a_typed_error_saying_what_is_wrong(data: bytes, says: str) -> None:
    with pytest.raises(EnvelopeError) as caught:
        decode_envelope(data)
    assert says in str(caught.value)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, NSQError)
