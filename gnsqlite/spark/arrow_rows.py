"""The source's rows as Arrow: received messages into a record batch, and back with the topic.

Both sources build their rows here, in the process that holds the reader,
as messages arrive: the WAL source writes :func:`message_rows` as a
segment file (:mod:`gnsqlite.spark.wal`); the source without a WAL keeps
them in a :class:`RowCache` until a batch takes them, and ships them
inside its :class:`NSQPartition` objects as an Arrow IPC stream
(:func:`pack_rows`), which an executor's ``read`` hands to Spark as record
batches (:func:`unpack_rows`): no Python step per row at planning or on
the executors, and no pickling of a tuple per message.

Uses no ``pyarrow.compute`` kernel, which takes 20-50 ms to import, on
the source's start-up path: only :func:`frame_rows` (the executors'
reads) imports it.
"""

from __future__ import annotations

import array
import operator
import sys
from collections import deque
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ..message import Message
from ..protocol import MessageFields
from ..protocol.frames import MESSAGE_HEADER_SIZE

__all__ = [
    "COLUMNS",
    "NSQPartition",
    "ROW_SCHEMA",
    "RowCache",
    "SCHEMA",
    "WIRE_ID",
    "frame_rows",
    "message_rows",
    "pack_rows",
    "split_rows",
    "unpack_rows",
    "with_topic",
]

#: The columns of a segment or packed partition (the source adds ``topic`` when reading).
ROW_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("body", pa.binary()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("attempts", pa.int32()),
        ("nsqd", pa.string()),
    ]
)

#: The source's schema, as Spark's DDL.
SCHEMA = "id string, body binary, timestamp timestamp, attempts int, topic string, nsqd string"

#: The source's columns, in the order of its schema.
COLUMNS = ["id", "body", "timestamp", "attempts", "topic", "nsqd"]

#: A message's 16 id bytes (the WAL's dedup key; the ``id`` column as bytes).
WIRE_ID = operator.attrgetter("wire_id")
_BODY = operator.attrgetter("body")
_ATTEMPTS = operator.attrgetter("attempts")
_NSQD = operator.attrgetter("nsqd")


_TIMESTAMP = operator.attrgetter("timestamp")
_TIMESTAMP_TYPE = ROW_SCHEMA.field("timestamp").type
_NANOS_TYPE = pa.timestamp("ns", tz="UTC")


def _micros(nanoseconds: int) -> int:
    return nanoseconds // 1000


def message_rows(messages: Sequence[Message]) -> pa.RecordBatch:
    """``messages`` as one record batch of :data:`ROW_SCHEMA`; never blocks.

    The ids' binary array is reinterpreted as strings and validated as
    UTF-8 (``pyarrow.ArrowInvalid`` if not), without a compute kernel.
    """
    n = len(messages)
    micros = pa.array(map(_micros, map(_TIMESTAMP, messages)), _TIMESTAMP_TYPE, size=n)
    return _rows(messages, micros, pa.array(map(_NSQD, messages), pa.string(), size=n))


#: Past any body: a binary array's offsets are 32-bit (pyarrow's slice kernel fails on a
#: stop near 2**63).
_TO_THE_END = 2**31 - 1
_SWAP = sys.byteorder == "little"  # nsqd's fields are big-endian
#: Where a message frame's fields lie: timestamp (8 bytes), attempts (2), id (16), body.
_ATTEMPTS_AT, _ID_AT = 8, MESSAGE_HEADER_SIZE - 16


def frame_rows(frames: Sequence[bytes], nsqd: str) -> pa.RecordBatch:
    """Messages' frame data (header, then body) as one record batch of :data:`ROW_SCHEMA`.

    ``frames`` are what a connection with ``message_class=bytes`` delivers,
    all from the nsqd at ``nsqd``. Every column is cut from one binary
    array of the frames by Arrow's slice kernel, and the big-endian
    timestamps and attempts are swapped by :mod:`array` in one call each:
    no Python step per message. Imports ``pyarrow.compute`` (the
    executors' path). Never blocks.
    """
    import pyarrow.compute as pc

    n = len(frames)
    if not n:
        return pa.RecordBatch.from_pylist([], schema=ROW_SCHEMA)
    data = pa.array(frames, pa.binary(), size=n)
    nanos = pa.Array.from_buffers(_NANOS_TYPE, n, [None, _big_endian(data, 0, "q", n)])
    attempts = pa.Array.from_buffers(
        pa.uint16(), n, [None, _big_endian(data, _ATTEMPTS_AT, "H", n)]
    )
    ids = pc.binary_slice(data, _ID_AT, MESSAGE_HEADER_SIZE)
    id_strings = pa.Array.from_buffers(pa.string(), n, ids.buffers(), null_count=0)
    id_strings.validate(full=True)
    return pa.RecordBatch.from_arrays(
        [
            id_strings,
            pc.binary_slice(data, MESSAGE_HEADER_SIZE, _TO_THE_END),
            nanos.cast(_TIMESTAMP_TYPE, safe=False),
            attempts.cast(pa.int32()),
            pa.repeat(pa.scalar(nsqd, pa.string()), n),
        ],
        schema=ROW_SCHEMA,
    )


def _big_endian(data: pa.Array, start: int, code: str, n: int) -> pa.Buffer:
    """The ``code`` (:mod:`array` type) field at ``start`` of each of ``data``, native order."""
    import pyarrow.compute as pc

    values = array.array(code)
    size = values.itemsize
    field = pc.binary_slice(data, start, start + size)  # n values of ``size`` bytes, end to end
    values.frombytes(memoryview(field.buffers()[2])[: n * size])
    if _SWAP:
        values.byteswap()
    return pa.py_buffer(values)


def _rows(
    deliveries: Sequence[MessageFields], timestamps: pa.Array, nsqd: pa.Array
) -> pa.RecordBatch:
    """The record batch of ``deliveries`` given its timestamp and nsqd columns."""
    n = len(deliveries)
    ids = pa.array(map(WIRE_ID, deliveries), pa.binary(), size=n)
    id_strings = pa.Array.from_buffers(pa.string(), n, ids.buffers(), null_count=0)
    id_strings.validate(full=True)
    return pa.RecordBatch.from_arrays(
        [
            id_strings,
            pa.array(map(_BODY, deliveries), pa.binary(), size=n),
            timestamps,
            pa.array(map(_ATTEMPTS, deliveries), pa.int32(), size=n),
            nsqd,
        ],
        schema=ROW_SCHEMA,
    )


def with_topic(batch: pa.RecordBatch, topic: str) -> pa.RecordBatch:
    """A record batch of :data:`ROW_SCHEMA` as the source's columns (:data:`COLUMNS`)."""
    column = pa.repeat(pa.scalar(topic, pa.string()), batch.num_rows)
    return pa.RecordBatch.from_arrays(
        [
            batch.column(0),
            batch.column(1),
            batch.column(2),
            batch.column(3),
            column,
            batch.column(4),
        ],
        names=COLUMNS,
    )


def pack_rows(batches: Sequence[pa.RecordBatch]) -> bytes:
    """Record batches of :data:`ROW_SCHEMA` as one Arrow IPC stream (copies them once)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, ROW_SCHEMA) as writer:
        for batch in batches:
            writer.write_batch(batch)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def split_rows(batches: Sequence[pa.RecordBatch], parts: int) -> list[list[pa.RecordBatch]]:
    """``batches`` cut into at most ``parts`` runs of nearly equal row counts (zero-copy slices)."""
    total = sum(b.num_rows for b in batches)
    if not total:
        return []
    size = -(-total // min(parts, total))
    out: list[list[pa.RecordBatch]] = [[]]
    room = size
    for batch in batches:
        at = 0
        while at < batch.num_rows:
            if not room:
                out.append([])
                room = size
            take = min(room, batch.num_rows - at)
            out[-1].append(batch.slice(at, take))
            at += take
            room -= take
    return out


class RowCache:
    """The rows of received messages, numbered in arrival order, until Spark commits them.

    The source appends each list of messages as it arrives (:meth:`add`, in
    the hub, while Spark runs the previous batch) so planning a batch only
    slices what is built (:meth:`rows`). Numbers are the ledger's ``seq``
    as long as batches take the oldest buffered messages first. Not
    thread-safe; never blocks.
    """

    def __init__(self) -> None:
        self._batches: deque[tuple[int, pa.RecordBatch]] = deque()  # (first number, rows)
        self.end = 0  # the number of the next message to arrive

    def add(self, messages: Sequence[Message]) -> None:
        """Build and keep the rows of ``messages``, the next ones to arrive."""
        self._batches.append((self.end, message_rows(messages)))
        self.end += len(messages)

    def rows(self, low: int, high: int) -> list[pa.RecordBatch] | None:
        """The rows numbered ``low`` to ``high - 1`` (slices); ``None`` if some are not kept."""
        out = []
        got = 0
        for first, batch in self._batches:
            last = first + batch.num_rows
            if last <= low or first >= high:
                continue
            at = max(low, first)
            out.append(batch.slice(at - first, min(high, last) - at))
            got += min(high, last) - at
        return out if got == high - low else None

    def drop_before(self, number: int) -> None:
        """Forget the rows of every batch wholly below ``number`` (committed by Spark)."""
        while self._batches and self._batches[0][0] + self._batches[0][1].num_rows <= number:
            self._batches.popleft()


def unpack_rows(data: bytes, topic: str) -> Iterator[pa.RecordBatch]:
    """The record batches :func:`pack_rows` made, as the source's columns."""
    for batch in pa.ipc.open_stream(data):
        yield with_topic(batch, topic)


class NSQPartition(InputPartition):
    """One Spark partition of a micro-batch of the source without a WAL: its rows.

    ``data`` is an Arrow IPC stream (:func:`pack_rows`) of ``rows`` rows
    of :data:`ROW_SCHEMA`; ``topic`` is the source's topic. Pickled to the
    executors by Spark.
    """

    def __init__(self, index: int, topic: str, data: bytes, rows: int) -> None:
        super().__init__(index)
        self.index = index
        self.topic = topic
        self.data = data
        self.rows = rows

    def __repr__(self) -> str:
        return f"<NSQPartition {self.index} of {self.topic}: {self.rows} messages>"
