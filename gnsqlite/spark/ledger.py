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
    calls it from its hub thread only.
    """

    def __init__(self, session: str) -> None:
        self.session = session
        self.buffered: deque[T] = deque()
        self.handed: deque[tuple[int, T]] = deque()  # (seq, message), seq ascending
        self.seq = 0
        self.tick = 0
        self.committed_seq = 0

    def offset(self) -> dict[str, Any]:
        """The offset covering every message handed out so far."""
        return {"session": self.session, "seq": self.seq, "tick": self.tick}

    def initial_offset(self) -> dict[str, Any]:
        """The offset before any message of this session."""
        return {"session": self.session, "seq": 0, "tick": 0}

    def mine(self, offset: Mapping[str, Any] | None) -> bool:
        """True if ``offset`` was issued by this session."""
        return bool(offset) and offset is not None and offset.get("session") == self.session

    def receive(self, message: T) -> None:
        """A message arrived from nsqd: buffer it until a batch takes it."""
        self.buffered.append(message)

    @property
    def uncommitted(self) -> int:
        """Messages handed to Spark whose batch Spark has not committed yet."""
        return self.seq - self.committed_seq

    def held(self) -> list[T]:
        """Every message still unfinished at nsqd: handed out or buffered."""
        return [m for _, m in self.handed] + list(self.buffered)

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
        taken: list[T] = []
        if eligible is None:
            while self.buffered and len(taken) < limit:
                taken.append(self.buffered.popleft())
        else:
            kept: deque[T] = deque()
            while self.buffered and len(taken) < limit:
                m = self.buffered.popleft()
                (taken if eligible(m) else kept).append(m)
            kept.extend(self.buffered)
            self.buffered = kept
        if taken:
            for message in taken:
                self.handed.append((self.seq, message))
                self.seq += 1
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
        if not self.mine(end):
            return []
        low = int(start["seq"]) if self.mine(start) else 0
        high = int(end["seq"])
        return [m for seq, m in self.handed if low <= seq < high]

    def commit(self, end: Mapping[str, Any]) -> list[T]:
        """Spark committed every batch up to ``end``: return their messages to finish.

        An offset of another session commits nothing.
        """
        if not self.mine(end):
            return []
        high = int(end["seq"])
        done: list[T] = []
        while self.handed and self.handed[0][0] < high:
            done.append(self.handed.popleft()[1])
        self.committed_seq = max(self.committed_seq, min(high, self.seq))
        return done

    def release(self) -> list[T]:
        """Forget every held message (the source stops) and return them."""
        out = self.held()
        self.handed.clear()
        self.buffered.clear()
        self.committed_seq = self.seq
        return out
