"""WAL partitions and their rows, and the dedup set of the newest WAL rows.

:class:`Dedup` remembers the ids of the newest rows, so a redelivery of a
message already written is finished instead of written again.

The driver writes one record batch of
:data:`~gnsqlite.spark.arrow_rows.ROW_SCHEMA` per segment
(:func:`~gnsqlite.spark.arrow_rows.message_rows`); an
:class:`NSQWalPartition` is pickled to an executor, whose
:func:`read_partition` reads its slices back as the source's rows.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ..message import Message, finish_all
from .arrow_rows import with_topic
from .segments import Slice
from .wal import WalStore

__all__ = ["Dedup", "NSQWalPartition", "read_partition"]


class NSQWalPartition(InputPartition):
    """One Spark partition of a micro-batch: slices of WAL segment files.

    Pickled to the executors, which open the files under ``location``.
    """

    def __init__(self, index: int, location: str, topic: str, slices: list[Slice]) -> None:
        super().__init__(index)
        self.index = index
        self.location = location
        self.topic = topic
        self.slices = slices

    def __repr__(self) -> str:
        rows = sum(s.rows for s in self.slices)
        return f"<NSQWalPartition {self.index} of {self.topic}: {rows} rows>"


def read_partition(
    partition: NSQWalPartition, store: WalStore | None = None
) -> Iterator[pa.RecordBatch]:
    """The partition's rows as record batches of the source's schema (blocks on storage)."""
    store = store if store is not None else WalStore(partition.location)
    for piece in partition.slices:
        for batch in store.read(piece):
            yield with_topic(batch, partition.topic)


class Dedup:
    """The ids of the newest WAL rows, bounded: a redelivery of one is finished, not written.

    Ids are kept as the 16 wire bytes, one set per segment, so adding a
    segment and forgetting the oldest cost no Python step per id.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._sets: collections.deque[frozenset[bytes]] = collections.deque()
        self._size = 0

    def __contains__(self, mid: bytes) -> bool:
        return any(mid in ids for ids in self._sets)

    def add(self, ids: Iterable[bytes]) -> None:
        """Remember ``ids`` (one segment's); forget the oldest beyond the capacity."""
        new = frozenset(ids)
        self._sets.append(new)
        self._size += len(new)
        while len(self._sets) > 1 and self._size - len(self._sets[0]) >= self.capacity:
            self._size -= len(self._sets.popleft())

    def unwritten(self, messages: list[Message]) -> list[Message]:
        """``messages`` less those already in the WAL, which are finished (nsqd lost our FIN).

        Only a redelivery (``attempts`` other than 1) can be in the WAL, so
        only those are looked up. Never blocks.
        """
        redelivered = [m for m in messages if m.attempts != 1]
        written = [m for m in redelivered if m.wire_id in self] if redelivered else []
        if not written:
            return messages
        finish_all(written)
        gone = set(written)
        return [m for m in messages if m not in gone]
