"""Rows cut from messages' frame data equal the fields the decoder reads one message at a time."""

from __future__ import annotations

import datetime
import random

import pytest

pa = pytest.importorskip("pyarrow", reason="the spark extra (pyarrow) is not installed")

from gnsqlite.protocol.frames import WireMessage, decode_message, encode_message  # noqa: E402
from gnsqlite.spark.arrow_rows import ROW_SCHEMA, frame_rows  # noqa: E402

pytestmark = pytest.mark.no_server

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def expected_row(frame: bytes, nsqd: str) -> dict[str, object]:
    """One message's row, decoded by the protocol's own decoder, field by field."""
    message = decode_message(frame)
    micros = message.timestamp // 1000
    return {
        "id": message.id.decode(),
        "body": message.body,
        "timestamp": EPOCH + datetime.timedelta(microseconds=micros),
        "attempts": message.attempts,
        "nsqd": nsqd,
    }


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_rows_cut_from_frames_equal_each_messages_decoded_fields(seed: int) -> None:
    rng = random.Random(seed)
    frames = [
        encode_message(
            WireMessage(
                b"%016x" % rng.getrandbits(64),
                rng.randbytes(rng.choice([0, 1, 25, 26, 27, rng.randrange(0, 5000)])),
                rng.randrange(0, 2**62),  # ns: up to the year 2116
                rng.choice([1, 2, 255, 256, 65535, rng.randrange(1, 65536)]),
            )
        )
        for _ in range(rng.randrange(1, 3000))
    ]
    rows = frame_rows(frames, "127.0.0.1:4150")
    assert rows.schema == ROW_SCHEMA, f"seed {seed}"
    assert rows.to_pylist() == [expected_row(f, "127.0.0.1:4150") for f in frames], f"seed {seed}"


def test_no_frames_are_no_rows_of_the_schema() -> None:
    rows = frame_rows([], "127.0.0.1:4150")
    assert rows.num_rows == 0 and rows.schema == ROW_SCHEMA


def test_an_id_that_is_not_text_is_refused() -> None:
    frame = encode_message(WireMessage(b"\xff" * 16, b"body", 1, 1))
    with pytest.raises(pa.ArrowInvalid):
        frame_rows([frame], "127.0.0.1:4150")
