"""The source's bookkeeping: which messages are buffered, in which batch, committed.

Pure (no Spark, no gevent, no clock): :class:`Ledger` numbers the messages a
source hands to Spark and turns them into offsets and back. An offset is
``{"session": <id>, "seq": <messages handed out>, "tick": <offsets issued>}``:

* ``session`` names one life of the source (one reader process). Messages
  live only in that process's memory, held unfinished at nsqd; an offset of
  another session (from the checkpoint of an earlier run) names messages
  this process does not hold, so its range reads as empty and committing it
  finishes nothing. nsqd redelivers the old session's unfinished messages
  to the new one, which numbers them afresh: no old id is ever resurrected
  from a checkpoint.
* ``seq`` counts the messages handed out in this session; a batch from
  offset ``a`` to ``b`` holds the messages numbered ``a.seq`` to ``b.seq - 1``.
* ``tick`` changes with every new offset, so a *flush* offset (no new
  message) still differs from the last one: Spark plans an empty batch and
  thereby commits the previous batch, whose messages are then finished.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

__all__ = ["Ledger"]

T = TypeVar("T")


class Ledger(Generic[T]):
    """Messages received (``buffered``), handed to Spark (``handed``) and committed.

    ``session`` is this source's unique id. Not thread-safe: the source
    calls it from its hub thread only. Messages move in slices of lists, not
    one Python step per message: handing out or committing a batch of
    100,000 costs a few list copies.
    """

    def __init__(self, session: str) -> None:
        self.session = session
        self.buffered: list[T] = []
        # (seq of the first, messages) per handed-out batch, seq ascending
        self.handed: deque[tuple[int, list[T]]] = deque()
        self.seq = 0
        self.tick = 0
        self.committed_seq = 0

    def offset(self) -> dict[str, Any]:
        """The offset covering every message handed out so far."""
        return {"session": self.session, "seq": self.seq, "tick": self.tick}

    def initial_offset(self) -> dict[str, Any]:
        """The offset before any message of this session."""
        return {"session": self.session, "seq": 0, "tick": 0}

    def seq_range(self, start: Mapping[str, Any], end: Mapping[str, Any]) -> tuple[int, int]:
        """The numbers of the batch from ``start`` to ``end``: ``(low, high)``, ``high`` excluded.

        ``(0, 0)`` for an ``end`` of another session (its batch reads as empty).
        """
        if not self.mine(end):
            return 0, 0
        return (int(start["seq"]) if self.mine(start) else 0), int(end["seq"])

    def mine(self, offset: Mapping[str, Any] | None) -> bool:
        """True if ``offset`` was issued by this session."""
        return bool(offset) and offset is not None and offset.get("session") == self.session

    def receive(self, message: T) -> None:
        """A message arrived from nsqd: buffer it until a batch takes it."""
        self.buffered.append(message)

    def receive_many(self, messages: list[T]) -> None:
        """Messages arrived from nsqd, in order: buffer them until a batch takes them."""
        self.buffered.extend(messages)

    @property
    def uncommitted(self) -> int:
        """Messages handed to Spark whose batch Spark has not committed yet."""
        return self.seq - self.committed_seq

    def held(self) -> list[T]:
        """Every message still unfinished at nsqd: handed out or buffered."""
        return [m for _, chunk in self.handed for m in chunk] + self.buffered

    def latest(
        self,
        start: Mapping[str, Any] | None,
        max_rows: int | None,
        eligible: Callable[[T], bool] | None = None,
    ) -> dict[str, Any]:
        """Hand out up to ``max_rows`` buffered messages and return the new end offset.

        Only messages for which ``eligible`` is true are taken (the others
        stay buffered, in order). With nothing to hand out, returns a flush
        offset when Spark has planned every handed-out message but not yet
        committed them (see the module docstring), else ``start`` itself:
        "no new data".
        """
        limit = len(self.buffered) if max_rows is None else max(0, max_rows)
        taken: list[T]
        if eligible is None:
            taken = self.buffered[:limit]
            del self.buffered[:limit]
        else:
            taken = []
            kept: list[T] = []
            i = 0
            while i < len(self.buffered) and len(taken) < limit:
                m = self.buffered[i]
                (taken if eligible(m) else kept).append(m)
                i += 1
            self.buffered = kept + self.buffered[i:]
        if taken:
            self.handed.append((self.seq, taken))
            self.seq += len(taken)
            self.tick += 1
            return self.offset()
        planned_all = self.mine(start) and start is not None and start.get("seq") == self.seq
        if self.uncommitted and planned_all:
            self.tick += 1
            return self.offset()
        if start is None:
            return self.offset()
        return dict(start)

    def batch(self, start: Mapping[str, Any], end: Mapping[str, Any]) -> list[T]:
        """The messages of the batch from ``start`` to ``end``; empty for another session's."""
        low, high = self.seq_range(start, end)
        out: list[T] = []
        for first, chunk in self.handed:
            if first + len(chunk) > low and first < high:
                out.extend(chunk[max(0, low - first) : high - first])
        return out

    def commit(self, end: Mapping[str, Any]) -> list[T]:
        """Spark committed every batch up to ``end``: return their messages to finish.

        An offset of another session commits nothing.
        """
        if not self.mine(end):
            return []
        high = int(end["seq"])
        done: list[T] = []
        while self.handed and self.handed[0][0] < high:
            first, chunk = self.handed.popleft()
            if first + len(chunk) > high:  # not a batch boundary: keep the rest
                self.handed.appendleft((high, chunk[high - first :]))
                chunk = chunk[: high - first]
            done.extend(chunk)
        self.committed_seq = max(self.committed_seq, min(high, self.seq))
        return done

    def release(self) -> list[T]:
        """Forget every held message (the source stops) and return them."""
        out = self.held()
        self.handed.clear()
        self.buffered.clear()
        self.committed_seq = self.seq
        return out
