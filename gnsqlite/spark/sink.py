"""The sink: Spark rows published to NSQ topics, for batch and streaming writes.

The writers are Arrow writers: each task receives its partition as
``pyarrow.RecordBatch`` objects, and MPUB bodies are cut straight from the
``body`` column's buffers (:mod:`gnsqlite.spark.arrow_mpub`), without a
Python object per row. Each task publishes its partition with MPUB in chunks that respect nsqd's
``--max-body-size`` and ``--max-msg-size``, keeps a few MPUBs pipelined and
waits for every ``OK`` before it reports success. Rows with a ``defer``
value are published one by one with DPUB. The task returns an
:class:`NSQCommitMessage` with its counts; the driver sums and logs them.

Connections live in a per-process :class:`ProducerPool`: opened by the first
task of an executor's Python worker that needs them, in a
:class:`~gnsqlite.spark._hub.HubThread`, and reused by later tasks of that
worker. The writer objects the driver plans with hold only options.

Delivery is at-least-once: a task that fails after some MPUBs were
answered is retried by Spark and publishes those rows again.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from ..errors import ConfigError
from ..producer import Producer
from ._hub import HubThread
from .arrow_mpub import as_binary, check_bodies, mpub_payloads
from .options import SinkOptions

__all__ = [
    "NSQCommitMessage",
    "NSQStreamWriter",
    "NSQWriter",
    "ProducerPool",
    "check_sink_schema",
    "summarize",
    "write_batches",
    "write_rows",
]

log = logging.getLogger(__name__)

_NUMBERS = (ShortType, IntegerType, LongType, FloatType, DoubleType, DecimalType)
_COLUMNS = {"body", "topic", "defer"}


@dataclass
class NSQCommitMessage(WriterCommitMessage):
    """What one task published: ``messages`` and ``bytes`` in all, ``publishes``
    (MPUB/DPUB commands answered ``OK``), and ``topics`` (messages per topic)."""

    partition_id: int
    messages: int = 0
    bytes: int = 0
    publishes: int = 0
    topics: dict[str, int] = field(default_factory=dict)


def summarize(messages: Sequence[WriterCommitMessage | None]) -> dict[str, Any]:
    """Sum the tasks' commit messages: totals, per topic, and tasks without one."""
    total: dict[str, Any] = {
        "messages": 0,
        "bytes": 0,
        "publishes": 0,
        "tasks": 0,
        "missing": 0,
        "topics": {},
    }
    for m in messages:
        if not isinstance(m, NSQCommitMessage):
            total["missing"] += 1
            continue
        total["tasks"] += 1
        total["messages"] += m.messages
        total["bytes"] += m.bytes
        total["publishes"] += m.publishes
        for topic, count in m.topics.items():
            total["topics"][topic] = total["topics"].get(topic, 0) + count
    return total


def check_sink_schema(schema: StructType, options: SinkOptions) -> None:
    """Fail at query start unless the input has a usable ``body`` (and ``topic``/``defer``)."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    unknown = sorted(set(fields) - _COLUMNS)
    if unknown:
        raise ConfigError(
            f"the nsq sink takes the columns body, topic and defer; {unknown[0]!r} is not one:"
            " select only those columns"
        )
    body = fields.get("body")
    if body is None:
        raise ConfigError("the nsq sink needs a 'body' column (binary or string)")
    if not isinstance(body, (BinaryType, StringType)):
        raise ConfigError(f"column 'body' is {body.simpleString()}: cast it to binary or string")
    topic: DataType | None = fields.get("topic")
    if topic is not None and not isinstance(topic, StringType):
        raise ConfigError(f"column 'topic' is {topic.simpleString()}: it must be a string")
    if topic is None and options.topic is None:
        raise ConfigError("give option 'topic' or a 'topic' column: the nsq sink needs a topic")
    defer = fields.get("defer")
    if defer is not None and not isinstance(defer, _NUMBERS):
        raise ConfigError(f"column 'defer' is {defer.simpleString()}: use seconds as a number")


class ProducerPool:
    """The producers of one process, keyed by addresses and connection options.

    Lazily starts one :class:`HubThread` and, per key, one
    :class:`~gnsqlite.producer.Producer` in it; a forked child starts
    afresh. :meth:`close` (also run at exit) closes them all.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = 0
        self._hub: HubThread | None = None
        self._producers: dict[Any, Producer] = {}

    def get(self, options: SinkOptions) -> tuple[HubThread, Producer]:
        """The hub thread and a started producer for ``options``; connects on first use."""
        key = (
            options.nsqd_tcp_addresses,
            options.connection,
            options.max_body_size,
            options.max_message_size,
            options.publish_timeout,
        )
        with self._lock:
            if self._pid != os.getpid():  # a fork: the parent's thread is not ours
                self._hub, self._producers, self._pid = None, {}, os.getpid()
            if self._hub is None or not self._hub.running:
                self._hub = HubThread("gnsqlite-sink")
                self._hub.start()
                self._producers = {}
            hub = self._hub
            producer = self._producers.get(key)
            if producer is None:
                producer = Producer(
                    options.nsqd_tcp_addresses,
                    connection_config=options.connection,
                    timeout=options.publish_timeout,
                    max_message_size=options.max_message_size,
                    max_body_size=options.max_body_size,
                )
                hub.call(producer.start)
                self._producers[key] = producer
        return hub, producer

    def close(self) -> None:
        """Close every producer and end the hub thread; blocks a few seconds at most."""
        with self._lock:
            hub, producers = self._hub, list(self._producers.values())
            self._hub, self._producers = None, {}
            if hub is None or self._pid != os.getpid() or not hub.running:
                return
        for producer in producers:
            try:
                hub.call(producer.close, timeout=5.0)
            except Exception as exc:
                log.debug("closing %r failed: %s", producer, exc)
        hub.stop(5.0)


#: The pool of this process (an executor's Python worker).
POOL = ProducerPool()
atexit.register(POOL.close)


class _Publisher:
    """Publishes one task's rows: chunked MPUBs per topic, pipelined, every OK awaited."""

    def __init__(self, options: SinkOptions, partition_id: int) -> None:
        self.options = options
        self.result = NSQCommitMessage(partition_id)
        self._hub, self._producer = POOL.get(options)
        self._waiting: list[tuple[concurrent.futures.Future[None], str, int, int]] = []

    def add_batch(self, batch: pa.RecordBatch) -> None:
        """Publish one record batch of the input (columns body [, topic] [, defer])."""
        o = self.options
        columns = {name.lower(): batch.column(i) for i, name in enumerate(batch.schema.names)}
        body = as_binary(columns["body"])
        check_bodies(body, o.max_message_size, f"partition {self.result.partition_id}")
        topics = columns.get("topic")
        if topics is not None and topics.null_count:
            if o.topic is None:
                raise ValueError("a row has a null topic and option 'topic' is not set")
            topics = pc.fill_null(topics, o.topic)
        defer = columns.get("defer")
        if defer is not None and defer.null_count < len(defer):
            later = pc.is_valid(defer)
            self._add_deferred(
                body.filter(later),
                defer.filter(later),
                None if topics is None else topics.filter(later),
            )
            now = pc.invert(later)
            body = body.filter(now)
            topics = None if topics is None else topics.filter(now)
        if topics is None:
            assert o.topic is not None  # check_sink_schema: option topic or a topic column
            self._add_bodies(o.topic, body)
            return
        for topic in pc.unique(topics).to_pylist():
            self._add_bodies(topic, body.filter(pc.equal(topics, topic)))

    def _add_bodies(self, topic: str, bodies: pa.Array) -> None:
        o = self.options
        for payload, count, size in mpub_payloads(
            bodies, o.max_messages_per_publish, o.max_body_size
        ):
            self._send(self._producer.multi_publish_encoded, (topic, payload), topic, count, size)

    def _add_deferred(self, bodies: pa.Array, defer: pa.Array, topics: pa.Array | None) -> None:
        # DPUB carries one message: rows with a defer value go one by one.
        default = self.options.topic
        topic_list = topics.to_pylist() if topics is not None else [default] * len(bodies)
        for body, seconds, topic in zip(
            bodies.to_pylist(), defer.to_pylist(), topic_list, strict=True
        ):
            self._send(self._producer.publish, (topic, body, float(seconds)), topic, 1, len(body))

    def _send(self, call: Any, args: tuple[Any, ...], topic: str, count: int, size: int) -> None:
        while len(self._waiting) >= self.options.max_pending_publishes:
            self._collect(self._waiting.pop(0))
        future = self._hub.submit(call, *args)
        self._waiting.append((future, topic, count, size))

    def _collect(self, item: tuple[concurrent.futures.Future[None], str, int, int]) -> None:
        future, topic, count, size = item
        future.result(self.options.publish_timeout + 5.0)
        r = self.result
        r.messages += count
        r.bytes += size
        r.publishes += 1
        r.topics[topic] = r.topics.get(topic, 0) + count

    def finish(self) -> NSQCommitMessage:
        while self._waiting:
            self._collect(self._waiting.pop(0))
        return self.result

    def abandon(self) -> None:
        """The task failed: wait briefly for what is in flight, so nothing leaks."""
        for future, *_ in self._waiting:
            future.cancel()
        concurrent.futures.wait([f for f, *_ in self._waiting], timeout=5.0)
        self._waiting.clear()


def _partition_id() -> int:
    try:
        from pyspark import TaskContext

        context = TaskContext.get()
        return context.partitionId() if context is not None else 0
    except Exception:  # pragma: no cover - outside a task
        return 0


def write_batches(options: SinkOptions, batches: Iterable[pa.RecordBatch]) -> NSQCommitMessage:
    """Publish Arrow record batches (columns body [, topic] [, defer]); blocks until every OK."""
    publisher = _Publisher(options, _partition_id())
    try:
        for batch in batches:
            if batch.num_rows:
                publisher.add_batch(batch)
        return publisher.finish()
    except BaseException:
        publisher.abandon()
        raise


def write_rows(options: SinkOptions, rows: Iterable[Any]) -> NSQCommitMessage:
    """Publish ``rows`` (``Row`` objects or dicts) as one record batch (:func:`write_batches`)."""
    records = [row.asDict() if hasattr(row, "asDict") else dict(row) for row in rows]
    if not records:
        return write_batches(options, [])
    names = [n for n in ("body", "topic", "defer") if any(n in r for r in records)]
    types = {"body": pa.binary(), "topic": pa.string(), "defer": pa.float64()}
    arrays = []
    for name in names:
        values = [r.get(name) for r in records]
        if name == "body":
            values = [v.encode("utf-8") if isinstance(v, str) else v for v in values]
        arrays.append(pa.array(values, types[name]))
    return write_batches(options, [pa.RecordBatch.from_arrays(arrays, names=names)])


def _log_commit(kind: str, messages: Sequence[WriterCommitMessage | None]) -> dict[str, Any]:
    total = summarize(messages)
    log.info(
        "nsq sink %s committed: %d messages (%d bytes) in %d publishes from %d tasks; per topic %s",
        kind,
        total["messages"],
        total["bytes"],
        total["publishes"],
        total["tasks"],
        total["topics"],
    )
    return total


def _log_abort(kind: str, messages: Sequence[WriterCommitMessage | None]) -> None:
    total = summarize(messages)
    log.warning(
        "nsq sink %s aborted: %d messages from %d finished tasks stay published"
        " (at-least-once: a retry publishes them again)",
        kind,
        total["messages"],
        total["tasks"],
    )


class NSQWriter(DataSourceArrowWriter):
    """The batch sink (``df.write.format("nsq")``); receives Arrow record batches."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.last_summary: dict[str, Any] | None = None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> NSQCommitMessage:
        """Publish one partition's record batches (runs in a task); returns its counts."""
        return write_batches(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Sum the tasks' counts and log them (runs on the driver)."""
        self.last_summary = _log_commit("write", messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Log what the finished tasks published before the job failed."""
        _log_abort("write", messages)


class NSQStreamWriter(DataSourceStreamArrowWriter):
    """The streaming sink (``df.writeStream.format("nsq")``); receives Arrow record batches."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.last_summary: dict[str, Any] | None = None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> NSQCommitMessage:
        """Publish one partition of a micro-batch as record batches (runs in a task)."""
        return write_batches(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Sum the tasks' counts of micro-batch ``batchId`` and log them."""
        self.last_summary = _log_commit(f"batch {batchId}", messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log what the finished tasks of micro-batch ``batchId`` published."""
        _log_abort(f"batch {batchId}", messages)
