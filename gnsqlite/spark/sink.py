"""The sink: Spark rows published to NSQ topics, for batch and streaming writes.

Each task publishes its partition with MPUB in chunks that respect nsqd's
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

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
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

from ..errors import ConfigError, MessageTooLargeError
from ..producer import Producer
from ._hub import HubThread
from .options import SinkOptions

__all__ = [
    "NSQCommitMessage",
    "NSQStreamWriter",
    "NSQWriter",
    "ProducerPool",
    "check_sink_schema",
    "summarize",
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
    total: dict[str, Any] = {"messages": 0, "bytes": 0, "publishes": 0, "tasks": 0,
                             "missing": 0, "topics": {}}
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
        key = (options.nsqd_tcp_addresses, options.connection, options.max_body_size,
               options.max_message_size, options.publish_timeout)
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
                    config=options.connection,
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


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"a body must be binary or string, not {type(value).__name__}")


class _Publisher:
    """Publishes one task's rows: chunked MPUBs per topic, pipelined, every OK awaited."""

    def __init__(self, options: SinkOptions, partition_id: int) -> None:
        self.options = options
        self.result = NSQCommitMessage(partition_id)
        self._hub, self._producer = POOL.get(options)
        self._pending: dict[str, tuple[list[bytes], int]] = {}
        self._waiting: list[tuple[concurrent.futures.Future[None], str, int, int]] = []

    def add(self, topic: str, body: bytes, defer: float | None) -> None:
        o = self.options
        if not body:
            raise ValueError(f"an empty body for topic {topic!r}: nsqd refuses empty messages")
        if len(body) > o.max_message_size:
            raise MessageTooLargeError(
                f"a body of {len(body)} bytes for topic {topic!r} exceeds"
                f" maxMessageSize={o.max_message_size} (nsqd's --max-msg-size)"
            )
        if defer is not None:
            self._send(topic, [body], defer)
            return
        bodies, size = self._pending.get(topic, ([], 4))
        if bodies and (len(bodies) >= o.max_messages_per_publish
                       or size + 4 + len(body) > o.max_body_size):
            self._send(topic, bodies, None)
            bodies, size = [], 4
        bodies.append(body)
        self._pending[topic] = (bodies, size + 4 + len(body))

    def _send(self, topic: str, bodies: list[bytes], defer: float | None) -> None:
        while len(self._waiting) >= self.options.max_pending_publishes:
            self._collect(self._waiting.pop(0))
        producer = self._producer
        if defer is None:
            future = self._hub.submit(producer.multi_publish, topic, bodies)
        else:
            future = self._hub.submit(producer.publish, topic, bodies[0], defer)
        self._waiting.append((future, topic, len(bodies), sum(map(len, bodies))))

    def _collect(self, item: tuple[concurrent.futures.Future[None], str, int, int]) -> None:
        future, topic, count, size = item
        future.result(self.options.publish_timeout + 5.0)
        r = self.result
        r.messages += count
        r.bytes += size
        r.publishes += 1
        r.topics[topic] = r.topics.get(topic, 0) + count

    def finish(self) -> NSQCommitMessage:
        for topic, (bodies, _) in list(self._pending.items()):
            if bodies:
                self._send(topic, bodies, None)
        self._pending.clear()
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


def write_rows(options: SinkOptions, rows: Iterable[Any]) -> NSQCommitMessage:
    """Publish ``rows`` (Spark ``Row`` objects); blocks until nsqd answered every MPUB."""
    publisher = _Publisher(options, _partition_id())
    default_topic = options.topic
    try:
        for row in rows:
            data = row.asDict() if hasattr(row, "asDict") else dict(row)
            body = data.get("body")
            if body is None:
                raise ValueError("a row has a null body: filter null bodies out before writing")
            topic = data.get("topic") or default_topic
            if topic is None:
                raise ValueError("a row has a null topic and option 'topic' is not set")
            defer = data.get("defer")
            publisher.add(topic, _as_bytes(body), None if defer is None else float(defer))
        return publisher.finish()
    except BaseException:
        publisher.abandon()
        raise


def _log_commit(kind: str, messages: Sequence[WriterCommitMessage | None]) -> dict[str, Any]:
    total = summarize(messages)
    log.info("nsq sink %s committed: %d messages (%d bytes) in %d publishes from %d tasks;"
             " per topic %s", kind, total["messages"], total["bytes"], total["publishes"],
             total["tasks"], total["topics"])
    return total


def _log_abort(kind: str, messages: Sequence[WriterCommitMessage | None]) -> None:
    total = summarize(messages)
    log.warning("nsq sink %s aborted: %d messages from %d finished tasks stay published"
                " (at-least-once: a retry publishes them again)", kind, total["messages"],
                total["tasks"])


class NSQWriter(DataSourceWriter):
    """The batch sink (``df.write.format("nsq")``); holds only options."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.last_summary: dict[str, Any] | None = None

    def write(self, iterator: Iterator[Any]) -> NSQCommitMessage:
        """Publish one partition (runs in a task); returns its counts."""
        return write_rows(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Sum the tasks' counts and log them (runs on the driver)."""
        self.last_summary = _log_commit("write", messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Log what the finished tasks published before the job failed."""
        _log_abort("write", messages)


class NSQStreamWriter(DataSourceStreamWriter):
    """The streaming sink (``df.writeStream.format("nsq")``); holds only options."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.last_summary: dict[str, Any] | None = None

    def write(self, iterator: Iterator[Any]) -> NSQCommitMessage:
        """Publish one partition of a micro-batch (runs in a task); returns its counts."""
        return write_rows(self.options, iterator)

    def commit(
        self, messages: list[WriterCommitMessage | None], batchId: int
    ) -> None:
        """Sum the tasks' counts of micro-batch ``batchId`` and log them."""
        self.last_summary = _log_commit(f"batch {batchId}", messages)

    def abort(
        self, messages: list[WriterCommitMessage | None], batchId: int
    ) -> None:
        """Log what the finished tasks of micro-batch ``batchId`` published."""
        _log_abort(f"batch {batchId}", messages)
