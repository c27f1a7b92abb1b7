"""The write-ahead log's index: segments, positions, batches. Pure (no I/O, no Spark).

A WAL source stores what it receives in numbered, immutable *segments*.
A *position* ``{"segment": s, "row": r}`` names the point before row ``r``
of segment ``s``; every row of a lower-numbered segment lies before it.
Spark's offsets are positions: a batch from ``start`` to ``end`` holds the
rows between them, in segment order. A position that ends a segment is
normalised to the start of the next number (``(s + 1, 0)``), so a commit up
to it frees every segment numbered below ``end["segment"]``.

Segments never change once written, and new ones are numbered above every
position handed out, so planning the same two positions again (a restarted
query replaying its last batch) yields the same rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Position", "Segment", "SegmentIndex", "Slice", "split_slices"]

Position = tuple[int, int]  # (segment number, row within it)


@dataclass(frozen=True)
class Segment:
    """One durable segment: its number, file ``name``, ``rows`` and ``size`` in bytes."""

    number: int
    name: str
    rows: int
    size: int


@dataclass(frozen=True)
class Slice:
    """Rows ``lo`` (included) to ``hi`` (excluded) of segment file ``name``."""

    name: str
    lo: int
    hi: int

    @property
    def rows(self) -> int:
        """How many rows the slice holds."""
        return self.hi - self.lo


def position(offset: Mapping[str, Any] | None) -> Position | None:
    """The position an offset dict names (``None`` for ``None``); raises ``ValueError``."""
    if offset is None:
        return None
    try:
        return int(offset["segment"]), int(offset["row"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(
            f"{offset!r} is not an offset of the nsq WAL source (segment, row): the checkpoint"
            " belongs to a query with another source or mode; use a new checkpointLocation"
        ) from None


def offset(pos: Position) -> dict[str, int]:
    """The offset dict Spark stores for ``pos``."""
    return {"segment": pos[0], "row": pos[1]}


class SegmentIndex:
    """The durable segments the source knows, by number; the bytes they hold.

    Not thread-safe: the source calls it from its hub thread only.
    """

    def __init__(self, segments: Iterable[Segment] = ()) -> None:
        self._segments: dict[int, Segment] = {}
        self.size = 0
        for segment in segments:
            self.add(segment)

    def __len__(self) -> int:
        return len(self._segments)

    def add(self, segment: Segment) -> None:
        """A segment became durable."""
        if segment.number in self._segments:
            raise ValueError(f"segment {segment.number} is already in the index")
        self._segments[segment.number] = segment
        self.size += segment.size

    def numbers(self) -> list[int]:
        """The segment numbers, ascending."""
        return sorted(self._segments)

    def first(self) -> Position:
        """The position before every known row (``(0, 0)`` when empty)."""
        numbers = self.numbers()
        return (numbers[0], 0) if numbers else (0, 0)

    def next_number(self) -> int:
        """A number above every known segment."""
        return max(self._segments, default=-1) + 1

    def _normal(self, pos: Position) -> Position:
        segment = self._segments.get(pos[0])
        if segment is not None and pos[1] >= segment.rows:
            return pos[0] + 1, 0
        return pos

    def end(self) -> Position:
        """The position after every known row."""
        return (self.next_number(), 0) if self._segments else (0, 0)

    def rows_after(self, start: Position) -> int:
        """How many known rows lie at or after ``start``."""
        return sum(
            max(0, s.rows - (start[1] if n == start[0] else 0))
            for n, s in self._segments.items()
            if n >= start[0]
        )

    def advance(self, start: Position, max_rows: int | None) -> Position:
        """The position ``max_rows`` rows after ``start`` (or the end, if fewer are known)."""
        pos = self._normal(start)
        left = max_rows
        for number in self.numbers():
            if number < pos[0]:
                continue
            segment = self._segments[number]
            lo = pos[1] if number == pos[0] else 0
            available = segment.rows - lo
            if left is not None and available >= left:
                return self._normal((number, lo + left))
            if left is not None:
                left -= available
            pos = (number + 1, 0)
        return pos

    def slices(self, start: Position, end: Position) -> list[Slice]:
        """The rows from ``start`` to ``end`` as slices of segment files, in order."""
        out: list[Slice] = []
        for number in self.numbers():
            if number < start[0] or number > end[0]:
                continue
            segment = self._segments[number]
            lo = start[1] if number == start[0] else 0
            hi = end[1] if number == end[0] else segment.rows
            hi = min(hi, segment.rows)
            if hi > lo:
                out.append(Slice(segment.name, lo, hi))
        return out

    def drop_before(self, number: int) -> list[Segment]:
        """Forget the segments numbered below ``number`` and return them (to delete)."""
        gone = [s for n, s in sorted(self._segments.items()) if n < number]
        for segment in gone:
            del self._segments[segment.number]
            self.size -= segment.size
        return gone

    def newest(self, rows: int) -> list[Segment]:
        """The newest segments holding at least ``rows`` rows (all if fewer), newest first."""
        out: list[Segment] = []
        total = 0
        for number in sorted(self._segments, reverse=True):
            if total >= rows:
                break
            out.append(self._segments[number])
            total += self._segments[number].rows
        return out


def split_slices(slices: list[Slice], parts: int) -> list[list[Slice]]:
    """Cut ``slices`` into at most ``parts`` groups of about equal rows, keeping order."""
    total = sum(s.rows for s in slices)
    if total == 0:
        return []
    parts = max(1, min(parts, total))
    size = -(-total // parts)
    groups: list[list[Slice]] = [[]]
    room = size
    for s in slices:
        lo = s.lo
        while lo < s.hi:
            if room == 0:
                groups.append([])
                room = size
            take = min(room, s.hi - lo)
            groups[-1].append(Slice(s.name, lo, lo + take))
            lo += take
            room -= take
    return groups
