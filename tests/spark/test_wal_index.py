"""The WAL's pure index: positions, batches, slices, commits."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from gnsqlite.spark.segments import Segment, SegmentIndex, Slice, position, split_slices

if TYPE_CHECKING:
    from gnsqlite.message import Message

pytestmark = pytest.mark.no_server


def index_of(*rows: int, first: int = 0) -> SegmentIndex:
    return SegmentIndex(Segment(first + i, f"s{first + i}", n, 10 * n) for i, n in enumerate(rows))


def test_batches_advance_across_segments_and_end_normalised() -> None:
    index = index_of(5, 3, 4)
    assert index.first() == (0, 0) and index.end() == (3, 0) and index.size == 120
    assert index.advance((0, 0), 4) == (0, 4)
    assert index.advance((0, 4), 4) == (2, 0)  # 1 row of s0 + all 3 of s1: ends s1
    assert index.advance((2, 0), 100) == (3, 0)
    assert index.advance((0, 0), None) == (3, 0)
    assert index.rows_after((0, 4)) == 8


def test_slices_are_the_same_rows_for_the_same_positions() -> None:
    index = index_of(5, 3, 4)
    start, end = (0, 4), (2, 2)
    slices = index.slices(start, end)
    assert slices == [Slice("s0", 4, 5), Slice("s1", 0, 3), Slice("s2", 0, 2)]
    index.add(Segment(3, "s3", 7, 70))  # a new segment does not change a planned batch
    assert index.slices(start, end) == slices
    groups = split_slices(slices, 2)
    assert [sum(s.rows for s in g) for g in groups] == [3, 3]
    assert [s for g in groups for s in g] == [
        Slice("s0", 4, 5),
        Slice("s1", 0, 2),
        Slice("s1", 2, 3),
        Slice("s2", 0, 2),
    ]
    assert split_slices([], 4) == []


def test_commit_drops_only_segments_before_the_end() -> None:
    index = index_of(5, 3, 4, first=7)
    assert index.first() == (7, 0) and index.next_number() == 10
    gone = index.drop_before(9)
    assert [s.number for s in gone] == [7, 8] and index.size == 40
    assert index.slices((9, 1), (10, 0)) == [Slice("s9", 1, 4)]
    assert [s.number for s in index_of(5, 3, 4).newest(4)] == [2]
    assert [s.number for s in index_of(5, 3, 4).newest(5)] == [2, 1]


def test_an_offset_of_the_other_mode_is_refused_with_advice() -> None:
    assert position({"segment": 3, "row": 1}) == (3, 1)
    with pytest.raises(ValueError, match="new checkpointLocation"):
        position({"session": "ab", "seq": 3, "tick": 1})


class _Responder:
    """A Responder recording the ids finished; Dedup never requeues or touches."""

    def __init__(self) -> None:
        self.finished: list[bytes] = []

    def on_finish(self, message: Message) -> None:
        self.finished.append(message.wire_id)

    def on_requeue(self, message: Message, delay: float | None, backoff: bool) -> None:
        raise AssertionError("Dedup requeued a message")

    def on_touch(self, message: Message) -> None:
        raise AssertionError("Dedup touched a message")


def test_dedup_finishes_redeliveries_of_written_rows_and_looks_up_only_redeliveries() -> None:
    from gnsqlite.message import Message
    from gnsqlite.spark.wal_rows import Dedup

    responder = _Responder()

    def msg(n: int, attempts: int) -> Message:
        return Message(b"%016d" % n, b"x", 0, attempts, "nsqd:4150", responder, 60.0)

    dedup = Dedup(capacity=4)
    dedup.add([b"%016d" % n for n in (1, 2)])
    dedup.add([b"%016d" % n for n in (3, 4)])
    first, again, new_again, fresh = msg(1, 1), msg(2, 2), msg(9, 3), msg(5, 1)
    # A first delivery (attempts 1) was never written, whatever its id: not looked up.
    assert dedup.unwritten([first, again, new_again, fresh]) == [first, new_again, fresh]
    assert responder.finished == [b"%016d" % 2] and again.has_responded
    batch = [msg(6, 1), msg(7, 1)]
    assert dedup.unwritten(batch) is batch  # nothing redelivered: the same list back
    dedup.add([b"%016d" % n for n in (5, 6)])  # beyond the capacity: 1 and 2 are forgotten
    assert b"%016d" % 1 not in dedup and b"%016d" % 3 in dedup
