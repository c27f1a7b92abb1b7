"""A batch's share read on an executor: subscribe, take, write the segment, FIN, yield.

With ``readOn=executors`` Spark runs :func:`read_share` in an executor's
Python worker for each :class:`NSQSharePartition` of a batch (planned by
:mod:`gnsqlite.spark.executor_source`). It blocks the worker's thread:

1. if the partition's segment (``batch-<batch>-part-<partition>.arrow``
   under ``walLocation``) exists, the partition was read before (a replayed
   batch, a recomputed stage, a retried or speculative task): its rows are
   the segment's, and nothing is taken from nsqd;
2. otherwise a :class:`ShareTaker` subscribes to the partition's nsqd in a
   :class:`~gnsqlite.spark._hub.HubThread` of its own and takes up to the
   share: until it has it, no message arrived for ``readIdleTimeout`` s, or
   ``readTimeout`` s passed. Redeliveries (``attempts`` > 1) whose id is in
   a recent segment are FINished and dropped (their row was written by a
   task that died before its FINs);
3. the rows are written as the segment, atomically and only if no other
   attempt wrote it first (:meth:`~gnsqlite.spark.wal.WalStore.write_first`);
4. the winner FINishes its messages once the segment is durable; a loser
   gives its messages back (``REQ 0``) and yields the winner's rows; both
   close their connections before yielding.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import gevent
import gevent.event
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ..consumer import Consumer
from ..errors import NSQConnectionError
from ..message import Message, finish_all
from ..protocol import defaults
from ._hub import HubThread
from .arrow_rows import message_rows, with_topic
from .consuming import close_all, rdy_shares, set_rdy, source_consumer, wait_subscribed
from .options import SourceOptions
from .planning import SEGMENT_PREFIX, segment_name
from .wal import WalStore
from .wal_rows import Dedup

__all__ = ["FAULT", "NSQSharePartition", "ShareTaker", "read_share"]

log = logging.getLogger(__name__)

#: Test hook: ``<stage>:<file>`` in this environment variable makes the first worker to
#: reach ``stage`` (``taken``: its share taken, before the segment write; ``written``: the
#: segment written, before the FINs) create ``file`` and SIGKILL itself. Once ``file``
#: exists, nothing happens.
FAULT = "GNSQLITE_SPARK_FAULT"

#: Received messages reach the taker at the latest this long after arriving, in seconds.
INTAKE_DELAY = 0.005

#: Segments whose ids a worker process keeps in memory for redelivery checks.
_ID_CACHE_SIZE = 64
_ids_cache: OrderedDict[str, frozenset[bytes]] = OrderedDict()


class NSQSharePartition(InputPartition):
    """One partition of a batch read on the executors: ``share`` messages from ``nsqd``.

    Pickled to an executor with the source's options; ``batch`` and
    ``index`` name its segment.
    """

    def __init__(self, index: int, batch: int, nsqd: str, share: int,
                 options: SourceOptions) -> None:
        super().__init__(index)
        self.index = index
        self.batch = batch
        self.nsqd = nsqd
        self.share = share
        self.options = options

    def __repr__(self) -> str:
        return (f"<NSQSharePartition {self.index} of batch {self.batch}: {self.share} messages"
                f" from {self.nsqd}>")

    @property
    def segment(self) -> str:
        """The file name of this partition's segment."""
        return segment_name(self.batch, self.index)


def read_share(partition: NSQSharePartition, store: WalStore | None = None
               ) -> Iterator[pa.RecordBatch]:
    """The partition's rows as the source's record batches (see the module doc). Blocks."""
    o = partition.options
    assert o.wal_location is not None
    store = store if store is not None else WalStore(o.wal_location)
    name = partition.segment
    if store.exists(name):
        rows: pa.Table | pa.RecordBatch = store.read_file(name)
    else:
        rows = _take(partition, store)
    batches = rows.to_batches() if isinstance(rows, pa.Table) else [rows]
    for batch in batches:
        yield with_topic(batch, o.topic)


def _take(partition: NSQSharePartition, store: WalStore) -> pa.Table | pa.RecordBatch:
    """Take the share from nsqd, write the segment, FIN or give back; the rows that won."""
    hub = HubThread(f"gnsqlite-read-{partition.batch}-{partition.index}")
    hub.start()
    taker = ShareTaker(partition.options, partition.nsqd, partition.share, store,
                       partition.segment)
    try:
        messages = hub.call(taker.take)
        _fault("taken")
        rows = message_rows(messages)
        if store.write_first(partition.segment, rows):
            _fault("written")
            hub.call(taker.finish)
            return rows
        log.info("%r: another attempt wrote the segment first; giving back %d messages",
                 partition, len(messages))
        hub.call(taker.give_back)
        return store.read_file(partition.segment)
    finally:
        try:
            hub.call(taker.close, timeout=partition.options.stop_timeout + 10.0)
        finally:
            hub.stop()


def _fault(stage: str) -> None:
    """The test hook :data:`FAULT`: SIGKILL this worker at ``stage``, once."""
    spec = os.environ.get(FAULT, "")
    if not spec.startswith(f"{stage}:"):
        return
    try:
        os.close(os.open(spec.split(":", 1)[1], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    os.kill(os.getpid(), signal.SIGKILL)


class ShareTaker:
    """Takes up to ``share`` messages of one nsqd and answers them; runs in a hub thread.

    Every method runs in the hub (through :meth:`HubThread.call`); the
    constructor opens nothing.
    """

    def __init__(self, options: SourceOptions, nsqd: str, share: int, store: WalStore,
                 segment: str) -> None:
        self.options = dataclasses.replace(options, nsqd_tcp_addresses=(nsqd,),
                                           lookupd_http_addresses=())
        self.nsqd = nsqd
        self.share = share
        self.store = store
        self.segment = segment
        self._consumers: list[Consumer] = []
        self._messages: list[Message] = []
        self._taking = False
        self._arrived: gevent.event.Event | None = None
        self._durable = False

    def take(self) -> list[Message]:
        """Subscribe and take up to the share (bounded by the read timeouts); blocks, in the hub."""
        o = self.options
        started = time.monotonic()
        self._arrived = gevent.event.Event()
        self._taking = True
        connections = max(1, -(-self.share // defaults.MAX_RDY_COUNT))
        self._consumers = [
            source_consumer(o, None, share, on_batch=self._on_batch, batch_size=share,
                            batch_timeout=INTAKE_DELAY)
            for share in rdy_shares(self.share, connections)
        ]
        for consumer in self._consumers:
            consumer.start()
        if not wait_subscribed(self._consumers, min(o.start_timeout, o.read_timeout)):
            raise NSQConnectionError(self.nsqd, f"could not subscribe to {o.topic}/{o.channel}"
                                     f" within {min(o.start_timeout, o.read_timeout)} s")
        deadline = started + o.read_timeout
        while len(self._messages) < self.share:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._arrived.clear()
            if not self._arrived.wait(min(left, o.read_idle_timeout)):
                break
        self._taking = False
        set_rdy(self._consumers, 0)
        messages, extra = self._messages[: self.share], self._messages[self.share :]
        for message in extra:
            message.requeue(0.0, backoff=False)
        self._messages = self._unwritten(messages)
        return self._messages

    def _on_batch(self, messages: list[Message]) -> None:
        for message in messages:
            message.enable_async()
        if not self._taking:
            for message in messages:
                message.requeue(0.0, backoff=False)
            return
        self._messages.extend(messages)
        if self._arrived is not None:
            self._arrived.set()

    def _unwritten(self, messages: list[Message]) -> list[Message]:
        """``messages`` less redeliveries already in a recent segment (those are FINished)."""
        if all(m.attempts == 1 for m in messages):
            return messages
        ids = gevent.get_hub().threadpool.spawn(self._recent_ids).get()
        dedup = Dedup(capacity=1 << 62)
        for segment_ids in ids or []:
            dedup.add(segment_ids)
        kept = dedup.unwritten(messages)
        if len(kept) < len(messages):
            log.info("%s/%s: %d redelivered messages were already in the WAL: finished",
                     self.options.topic, self.options.channel, len(messages) - len(kept))
        return kept

    def _recent_ids(self) -> list[frozenset[bytes]]:
        """The ids of every segment under ``walLocation`` but this partition's (blocks on I/O)."""
        out = []
        for info in self.store.listing(SEGMENT_PREFIX):
            name = info.base_name
            if name == self.segment:
                continue
            ids = _ids_cache.get(name)
            if ids is None:
                column: Any = self.store.read_file(name).column("id")
                ids = frozenset(str(i).encode() for i in column.to_pylist())
                _ids_cache[name] = ids
                while len(_ids_cache) > _ID_CACHE_SIZE:
                    _ids_cache.popitem(last=False)
            out.append(ids)
        return out

    def finish(self) -> None:
        """The segment is durable: FIN every message taken, then close (blocks, in the hub)."""
        self._durable = True
        finish_all(self._messages)
        self.close()

    def give_back(self) -> None:
        """Another attempt's segment won: ``REQ 0`` every message taken, then close."""
        for message in self._messages:
            message.requeue(0.0, backoff=False)
        self.close()

    def close(self) -> None:
        """Close the connections (CLS, then nsqd requeues what is unanswered). Safe twice."""
        self._taking = False
        consumers, self._consumers = self._consumers, []
        if not self._durable:
            for message in self._messages:
                if not message.has_responded:
                    message.requeue(0.0, backoff=False)
        if consumers:
            close_all(consumers, self.options.stop_timeout)
