"""WAL rows as Arrow, both ways: received messages into a segment, segment slices into rows.

:class:`Dedup` remembers the ids of the newest rows, so a redelivery of a
message already written is finished instead of written again.

:func:`segment_batch` is what the driver writes (one record batch of
:data:`~gnsqlite.spark.wal.ROW_SCHEMA` per segment); an
:class:`NSQWalPartition` is pickled to an executor, whose
:func:`read_partition` reads its slices back as the source's rows.
"""

from __future__ import annotations

import collections
import operator
from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ..message import Message, finish_all
from .segments import Slice
from .wal import ROW_SCHEMA, WalStore

__all__ = ["WIRE_ID", "Dedup", "NSQWalPartition", "read_partition", "segment_batch"]


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


def read_partition(partition: NSQWalPartition,
                   store: WalStore | None = None) -> Iterator[pa.RecordBatch]:
    """The partition's rows as record batches of the source's schema (blocks on storage)."""
    store = store if store is not None else WalStore(partition.location)
    for piece in partition.slices:
        for batch in store.read(piece):
            topic = pa.repeat(pa.scalar(partition.topic, pa.string()), batch.num_rows)
            yield pa.RecordBatch.from_arrays(
                [batch.column(0), batch.column(1), batch.column(2), batch.column(3), topic,
                 batch.column(4)],
                names=["id", "body", "timestamp", "attempts", "topic", "nsqd"],
            )


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


#: A message's 16 id bytes (the dedup key of a WAL row).
WIRE_ID = operator.attrgetter("wire_id")
_BODY = operator.attrgetter("body")
_ATTEMPTS = operator.attrgetter("attempts")
_NSQD = operator.attrgetter("nsqd")


def _micros(message: Message) -> int:
    return message.timestamp // 1000


def segment_batch(messages: Sequence[Message]) -> pa.RecordBatch:
    """``messages`` as one record batch of :data:`~gnsqlite.spark.wal.ROW_SCHEMA`.

    Uses no ``pyarrow.compute`` kernel, which takes 20-50 ms to import on
    the source's start-up path: the ids' binary array is reinterpreted as
    strings, and validated as UTF-8 (``pyarrow.ArrowInvalid`` if not).
    """
    n = len(messages)
    ids = pa.array(map(WIRE_ID, messages), pa.binary(), size=n)
    id_strings = pa.Array.from_buffers(pa.string(), n, ids.buffers(), null_count=0)
    id_strings.validate(full=True)
    return pa.RecordBatch.from_arrays([
        id_strings,
        pa.array(map(_BODY, messages), pa.binary(), size=n),
        pa.array(map(_micros, messages), ROW_SCHEMA.field("timestamp").type, size=n),
        pa.array(map(_ATTEMPTS, messages), pa.int32(), size=len(messages)),
        pa.array(map(_NSQD, messages), pa.string(), size=len(messages)),
    ], schema=ROW_SCHEMA)
