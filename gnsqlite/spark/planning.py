"""Planning a batch read on the executors: nsqd's numbers into shares. Pure (no I/O, no Spark).

With ``readOn=executors`` the driver reads no message. It asks each nsqd of
the topic for its channel's ``depth`` and ``in_flight_count`` (``/stats``)
and plans a batch as *shares*: (nsqd TCP address, messages) pairs, one per
Spark partition. The plan travels in the batch's end offset::

    {"batch": 7, "shares": [["10.0.0.1:4150", 5000], ["10.0.0.2:4150", 5000]]}

so a replayed batch (a restarted driver, a recomputed stage) is planned
from the checkpoint alone into the same partitions, whose segments
(named by batch and partition) then hold the rows it read the first time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Backlog", "BatchPlan", "plan_shares", "segment_name", "SEGMENT_PREFIX"]

#: The names of the executors' segments start with this.
SEGMENT_PREFIX = "batch-"


def segment_name(batch: int, partition: int) -> str:
    """The file name of the segment of partition ``partition`` of batch ``batch``."""
    return f"{SEGMENT_PREFIX}{batch:012d}-part-{partition:05d}.arrow"


def segment_batch(name: str) -> int | None:
    """The batch number in a segment's file name; ``None`` for another file."""
    if not name.startswith(SEGMENT_PREFIX) or not name.endswith(".arrow"):
        return None
    digits = name[len(SEGMENT_PREFIX) : len(SEGMENT_PREFIX) + 12]
    return int(digits) if digits.isdigit() else None


@dataclass(frozen=True)
class Backlog:
    """One nsqd's numbers for the channel: ``depth`` and ``in_flight`` messages (``/stats``)."""

    tcp_address: str
    depth: int
    in_flight: int

    @property
    def available(self) -> int:
        """Messages a batch may get from this nsqd: the queued, and the held that come back."""
        return self.depth + self.in_flight


@dataclass(frozen=True)
class BatchPlan:
    """Batch ``batch``'s shares: ``(nsqd TCP address, messages)`` per partition, in order."""

    batch: int
    shares: tuple[tuple[str, int], ...]

    @property
    def rows(self) -> int:
        """Messages planned in all."""
        return sum(n for _, n in self.shares)

    def offset(self) -> dict[str, Any]:
        """The end offset Spark stores for this batch."""
        return {"batch": self.batch, "shares": [[a, n] for a, n in self.shares]}

    @classmethod
    def from_offset(cls, offset: Mapping[str, Any] | None) -> BatchPlan:
        """The plan an end offset carries; the empty plan of batch 0 for ``None``/``{}``."""
        if not offset:
            return cls(0, ())
        try:
            return cls(
                int(offset["batch"]), tuple((str(a), int(n)) for a, n in offset.get("shares", ()))
            )
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"offset {dict(offset)!r} is not an offset of the nsq source with readOn="
                "executors; a checkpoint belongs to one readOn mode: start the query on a new"
                " checkpointLocation"
            ) from None


def plan_shares(
    backlogs: Sequence[Backlog], max_rows: int | None, partitions: int
) -> list[tuple[str, int]]:
    """Cut the backlog into at most ``partitions`` shares (at least one per nsqd with depth).

    Only nsqd with a ``depth`` get a share (in-flight messages alone are
    held by a consumer and come back only at its timeout). ``max_rows``
    (``None``: no bound) caps the sum; each nsqd gets rows in proportion to
    what it has, and partitions in proportion to its rows.
    """
    ready = [b for b in backlogs if b.depth > 0]
    total = sum(b.available for b in ready)
    if not total:
        return []
    limit = total if max_rows is None else min(total, max_rows)
    rows = _proportional([b.available for b in ready], limit)
    kept = [(b, n) for b, n in zip(ready, rows, strict=True) if n > 0]
    parts = _proportional([n for _, n in kept], max(partitions, len(kept)), at_least_one=True)
    shares: list[tuple[str, int]] = []
    for (backlog, n), k in zip(kept, parts, strict=True):
        k = min(k, n)
        shares += [(backlog.tcp_address, n // k + (1 if i < n % k else 0)) for i in range(k)]
    return shares


def _proportional(weights: Sequence[int], total: int, at_least_one: bool = False) -> list[int]:
    """``total`` cut in proportion to ``weights`` (largest remainders; each >= 1 if asked)."""
    if not weights:
        return []
    base = [1 if at_least_one else 0] * len(weights)
    left = total - sum(base)
    whole = sum(weights)
    exact = [left * w / whole for w in weights]
    out = [b + int(e) for b, e in zip(base, exact, strict=True)]
    rest = total - sum(out)
    order = sorted(range(len(weights)), key=lambda i: exact[i] - int(exact[i]), reverse=True)
    for i in order[:rest]:
        out[i] += 1
    return out
