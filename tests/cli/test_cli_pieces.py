"""The pure pieces of the commands: record splitting, output lines, the stats table."""

from __future__ import annotations

import io
import json

from gnsqlite.cli.pub import read_records
from gnsqlite.cli.stats import format_table
from gnsqlite.cli.tail import format_message
from gnsqlite.message import Message


def test_records_are_split_across_reads_and_empty_ones_skipped() -> None:
    data = b"".join(b"record %d\n" % i for i in range(20_000)) + b"\n\nlast"
    records = list(read_records(io.BytesIO(data), b"\n"))  # spans many 64 KiB reads
    assert len(records) == 20_001
    assert records[0] == b"record 0" and records[-1] == b"last"
    assert list(read_records(io.BytesIO(b"a||b||||c"), b"||")) == [b"a", b"b", b"c"]
    assert list(read_records(io.BytesIO(b""), b"\n")) == []


class _NoResponder:
    """A Responder for messages these tests never answer: any answer fails the test."""

    def on_finish(self, message: Message) -> None:
        raise AssertionError("not answered in these tests")

    def on_requeue(self, message: Message, delay: float | None, backoff: bool) -> None:
        raise AssertionError("not answered in these tests")

    def on_touch(self, message: Message) -> None:
        raise AssertionError("not answered in these tests")


def test_tail_lines_raw_and_json() -> None:
    message = Message(
        "0123456789abcdef",
        b"\xffbin",
        1_700_000_000_000_000_000,
        2,
        "127.0.0.1:4150",
        _NoResponder(),
        60.0,
    )
    assert format_message(message, "raw") == b"\xffbin\n"
    record = json.loads(format_message(message, "json"))
    assert record == {
        "id": "0123456789abcdef",
        "timestamp": 1_700_000_000_000_000_000,
        "attempts": 2,
        "nsqd": "127.0.0.1:4150",
        "body_base64": "/2Jpbg==",
    }


def test_the_stats_table_aligns_columns() -> None:
    table = format_table(
        [
            {
                "topic": "clicks",
                "depth": 1200,
                "message_count": 5000,
                "channels": [
                    {
                        "channel": "archive",
                        "depth": 7,
                        "in_flight_count": 3,
                        "deferred_count": 0,
                        "requeue_count": 12,
                        "timeout_count": 1,
                        "message_count": 5000,
                        "client_count": 2,
                    },
                ],
            },
        ]
    )
    lines = table.splitlines()
    assert lines[0].startswith("TOPIC / CHANNEL")
    assert lines[1].split() == ["clicks", "1,200", "5,000"]
    assert lines[2].split() == ["archive", "7", "3", "0", "12", "1", "5,000", "2"]
    assert len({len(line) for line in lines[1:]} | {len(lines[0])}) <= 2
    assert format_table([]) == "no topics\n"
