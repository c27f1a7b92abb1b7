"""The write-ahead-logged streaming source: replayable batches from NSQ.

:class:`NSQWalStreamReader` is the source when option ``walLocation`` is set.
It lives in the Python process Spark starts on the driver for the query's
source; its consumers (``connectionsPerNsqd`` per nsqd, each with a share of
``maxInFlight``) run in a :class:`~gnsqlite.spark._hub.HubThread` and consume
continuously, between batches too:

1. received messages arrive in lists through the consumer's batch path
   (:mod:`gnsqlite.consumer.batch`) and are buffered (at most ``maxInFlight``: by
   default two connections of RDY 2500, and segments of 2500, so nsqd keeps
   sending the next segment while one is written);
2. a *segment* is cut when ``walSegmentMessages`` messages are buffered or
   ``walFlushInterval`` seconds after its first message; a worker thread
   writes it as an Arrow IPC file under ``walLocation`` and makes it durable
   (:mod:`gnsqlite.spark.wal`) while the hub keeps receiving;
3. only then are its messages FINished, in one write per connection
   (:func:`~gnsqlite.message.finish_all`), and the segment becomes visible
   to Spark's planning.

Offsets are positions in the WAL (:mod:`gnsqlite.spark.segments`);
:meth:`partitions` hands out file names and row ranges, executors read the
files, :meth:`commit` deletes the segments Spark no longer needs. A
restarted query re-plans its last batch from the same immutable files;
segments written but never planned are read by the next batch.

While a flood arrives (segments cut at least half full), the next batch is
held back until it holds ``maxMessagesPerBatch`` rows or its oldest segment
is ``walBatchDelay`` seconds old: fewer, larger batches, so Spark's fixed
cost per batch does not starve ingestion. A new query's first batch waits
for its first segment (:func:`~gnsqlite.spark.consuming.hold_first_batch`).

Above ``walMaxBytes`` of uncommitted segments the source takes no messages
(RDY 0) until Spark's commits bring it below. A storage failure stops
taking messages, gives every unwritten message back (``REQ 0``) and fails
the query's next call with :class:`~gnsqlite.spark.wal.WalStorageError`.

Duplicates after a crash: nsqd redelivers a message whose FIN it never
processed. The source remembers the ids of the newest ``2 x maxInFlight``
WAL rows (read back from the newest segments at start) and FINishes such
a redelivery without writing it again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import gevent
import gevent.event
import pyarrow as pa

from ..consumer import Consumer
from ..errors import NSQConnectionError
from ..message import Message, finish_all
from .arrow_rows import WIRE_ID, message_rows
from .consuming import (
    await_fill,
    close_all,
    hold_first_batch,
    rdy_shares,
    set_rdy,
    source_consumer,
    wait_subscribed,
)
from .options import SourceOptions
from .segments import Position, SegmentIndex, offset, position, split_slices
from .shell import SourceShell
from .wal import WalStorageError, WalStore
from .wal_rows import Dedup, NSQWalPartition, read_partition

__all__ = ["DRIVER_WAL_WARNING", "NSQWalStreamReader"]

log = logging.getLogger(__name__)

#: Received messages reach the source at the latest this long after arriving, in seconds
#: (the consumer's ``batch_timeout``; bursts reach it at once, as starvation or a full batch).
INTAKE_DELAY = 0.005

#: Logged once per query, when the WAL source reading on the driver starts.
DRIVER_WAL_WARNING = (
    "nsq source %s/%s reads on the driver (readOn=driver) into the write-ahead log at %s:"
    " exactly-once with an idempotent sink; every message passes through this one process,"
    " so ingest does not grow with the cluster: on a cluster set option readOn=executors"
)


class NSQWalStreamReader(SourceShell):
    """The ``nsq`` streaming source with a write-ahead log, read on the driver; Spark calls it.

    The constructor starts nothing: the store is listed and the consumer
    started at Spark's first call, in the process that holds the reader
    (:class:`~gnsqlite.spark.shell.SourceShell`). Spark pickles this object
    to the executors for :meth:`read`; only the options travel.
    """

    partition_type = NSQWalPartition
    hub_name = "gnsqlite-wal-source"
    warning = DRIVER_WAL_WARNING
    stop_grace = 30.0

    def __init__(self, options: SourceOptions, store: WalStore | None = None) -> None:
        if options.wal_location is None:
            raise ValueError("NSQWalStreamReader needs option walLocation")
        super().__init__(options)
        self._store = store
        self._consumers: list[Consumer] = []  # connectionsPerNsqd of them
        self._index = SegmentIndex()
        self._durable_at: dict[int, float] = {}  # segment number -> time.monotonic() written
        self._grown: gevent.event.Event | None = None  # set when a segment becomes durable
        self._flooding = False  # the newest segment was at least half full: a flood
        self._next = 0  # the number of the next segment to write
        self._buffer: list[Message] = []
        self._first_arrival = 0.0
        self._last_arrival = 0.0
        self._started_at = 0.0
        self._wake: gevent.event.Event | None = None
        self._writer: gevent.Greenlet[[], None] | None = None
        self._writing = 0  # messages in the segment being written
        self._failure: WalStorageError | None = None
        self._paused = False
        self._dedup = Dedup(2 * options.max_in_flight)
        self._available_now = False
        self._answered = False  # latestOffset answered once in this process
        self._available_now_end: Position | None = None

    # -- the mode's hooks ----------------------------------------------------------

    def _prepare(self, offsets: Sequence[Mapping[str, Any] | None]) -> None:
        """List the WAL (Spark's thread, before the hub starts); number new segments above it."""
        segments = self.store.prepare()
        self._index = SegmentIndex(segments)
        # New segments are numbered above every file and every offset Spark
        # holds, so a batch planned again reads the same files.
        hinted = [p[0] + (1 if p[1] else 0) for p in map(position, offsets) if p is not None]
        self._next = max([self._index.next_number(), *hinted])
        for segment in reversed(self._index.newest(2 * self.options.max_in_flight)):
            self._dedup.add(i.encode("ascii") for i in self.store.read_ids(segment))
        if segments:
            log.info(
                "%r: %d segments (%d rows, %d bytes) in the WAL at start",
                self,
                len(segments),
                self._index.rows_after(self._index.first()),
                self._index.size,
            )

    def _start(self) -> None:
        o = self.options
        self._wake = gevent.event.Event()
        self._grown = gevent.event.Event()
        self._started_at = time.monotonic()
        self._consumers = [
            source_consumer(
                o,
                None,
                share,
                on_batch=self._on_batch,
                batch_size=min(o.wal_segment_messages, share),
                batch_timeout=min(INTAKE_DELAY, o.wal_flush_interval),
            )
            for share in rdy_shares(o.max_in_flight, o.connections_per_nsqd)
        ]
        self._writer = gevent.spawn(self._write_loop)
        self._update_flow()
        for consumer in self._consumers:
            consumer.start()
        log.info(
            "%r: consuming with max_in_flight=%d over %d connections per nsqd into %s",
            self,
            o.max_in_flight,
            o.connections_per_nsqd,
            self.store.location,
        )

    def _stop(self) -> None:
        """Spark ends the query: give back unwritten messages, close (in the hub).

        What is in the WAL stays there for the next run of the query.
        """
        consumers = self._consumers
        set_rdy(consumers, 0)
        writer = self._writer
        if writer is not None:
            # A segment being written finishes (its messages get their FIN);
            # the loop ends before cutting another.
            if self._wake is not None:
                self._wake.set()
            writer.join(self.options.stop_timeout + 20.0)
            writer.kill()
        self._give_back()
        close_all(consumers, self.options.stop_timeout)

    def _give_back(self) -> None:
        buffered, self._buffer = self._buffer, []
        for message in buffered:
            message.requeue(0.0, backoff=False)
        if buffered:
            log.info("%r: gave back %d messages not yet in the WAL", self, len(buffered))

    def _on_batch(self, messages: list[Message]) -> None:
        """Take what the consumer received (its worker greenlet, in the hub); never blocks.

        The source answers every message itself: FIN once its segment is
        durable, ``REQ 0`` when it gives it back; a redelivery of a message
        already in the WAL is finished, not buffered (:meth:`Dedup.unwritten`).
        """
        for message in messages:
            message.enable_async()
        now = time.monotonic()
        self._last_arrival = now
        if self._stopped or self._failure is not None:
            for message in messages:
                message.requeue(0.0, backoff=False)
            return
        messages = self._dedup.unwritten(messages)
        if not messages:
            return
        buffer = self._buffer
        was = len(buffer)
        if not was:
            self._first_arrival = now
        buffer.extend(messages)
        if not was or len(buffer) >= self.options.wal_segment_messages:
            assert self._wake is not None
            self._wake.set()

    def _write_loop(self) -> None:
        """Cut segments, write them in a worker thread, then FIN their messages."""
        o = self.options
        wake = self._wake
        assert wake is not None
        threadpool = gevent.get_hub().threadpool
        while True:
            wake.wait()
            wake.clear()
            if self._stopped:
                return
            if not self._buffer:
                continue
            while len(self._buffer) < o.wal_segment_messages:
                left = self._first_arrival + o.wal_flush_interval - time.monotonic()
                if left <= 0:
                    break
                wake.wait(left)
                wake.clear()
            messages = self._buffer[: o.wal_segment_messages]
            del self._buffer[: len(messages)]
            if self._buffer:
                self._first_arrival = time.monotonic()
                wake.set()
            batch = message_rows(messages)
            number = self._next
            self._writing = len(messages)
            try:
                segment = threadpool.spawn(self.store.write, number, batch).get()
            except WalStorageError as exc:
                self._fail(exc, messages)
                return
            except Exception as exc:
                self._fail(
                    WalStorageError(f"WAL write failed at {self.store.location}: {exc}"), messages
                )
                return
            finally:
                self._writing = 0
            assert segment is not None
            self._next = number + 1
            finish_all(messages)  # one FIN write per connection, not a call per message
            self._dedup.add(map(WIRE_ID, messages))
            self._index.add(segment)
            self._durable_at[number] = time.monotonic()
            self._flooding = 2 * len(messages) >= o.wal_segment_messages
            self._update_flow()
            assert self._grown is not None
            self._grown.set()

    def _fail(self, exc: WalStorageError, messages: list[Message]) -> None:
        log.error("%r: %s; giving unwritten messages back to nsqd", self, exc)
        self._failure = exc
        set_rdy(self._consumers, 0)
        for message in messages:
            message.requeue(0.0, backoff=False)
        self._give_back()

    def _update_flow(self) -> None:
        """RDY 0 while the uncommitted WAL is above ``walMaxBytes``; the budget below."""
        if not self._consumers or self._failure is not None or self._stopped:
            return
        over = self._index.size > self.options.wal_max_bytes
        if over and not self._paused:
            self._paused = True
            set_rdy(self._consumers, 0)
            log.info(
                "%r: the uncommitted WAL holds %d bytes > walMaxBytes=%d: paused",
                self,
                self._index.size,
                self.options.wal_max_bytes,
            )
        elif not over and self._paused:
            self._paused = False
            set_rdy(self._consumers, self.options.max_in_flight)
            log.info("%r: the uncommitted WAL is back to %d bytes: resumed", self, self._index.size)

    def _check(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _initial(self) -> dict[str, int]:
        self._check()
        o = self.options
        static_only = o.nsqd_tcp_addresses and not o.lookupd_http_addresses
        if static_only and not wait_subscribed(self._consumers, o.start_timeout):
            raise NSQConnectionError(
                ",".join(o.nsqd_tcp_addresses),
                f"the nsq source could not subscribe to {o.topic}/{o.channel} within"
                f" startTimeout={o.start_timeout} s; check nsqdTcpAddresses",
            )
        return offset(self._index.first())

    def _latest(
        self, start: Mapping[str, Any] | None, max_rows: int | None, min_rows: int | None
    ) -> dict[str, int]:
        self._check()
        begin = position(start) or self._index.first()
        if self._available_now:
            if self._available_now_end is None:
                self._wait_quiet()
                self._check()
                self._available_now_end = self._index.end()
            end = self._index.advance(begin, max_rows)
            return offset(min(end, max(begin, self._available_now_end)))
        if min_rows is not None and self._index.rows_after(begin) < min_rows:
            return offset(begin)
        if not self._answered:
            self._answered = True
            if self.options.wal_batch_delay > 0 and self._grown is not None:
                hold_first_batch(
                    lambda: self._index.advance(begin, max_rows) != begin,
                    self._grown,
                    lambda: self._filling(begin, max_rows),
                    lambda: self._await_fill(begin, max_rows),
                    lambda: self._stopped or self._failure is not None,
                )
            return offset(self._index.advance(begin, max_rows))
        end = self._index.advance(begin, max_rows)
        if end != begin and self._filling(begin, max_rows):
            if not self._await_fill(begin, max_rows):
                return offset(begin)
            end = self._index.advance(begin, max_rows)
        return offset(end)

    def _await_fill(self, begin: Position, max_rows: int | None) -> bool:
        """Wait (in the hub) up to :data:`HOLD_WAIT` s: ``True`` once :meth:`_filling` ends."""
        grown = self._grown
        assert grown is not None
        return await_fill(
            lambda: self._filling(begin, max_rows),
            grown,
            self.options.wal_flush_interval,
            lambda: self._stopped or self._failure is not None,
        )

    def _filling(self, begin: Position, max_rows: int | None) -> bool:
        """Hold the next batch back while a flood fills it (the module docstring says why).

        While segments are cut at least half full (half of ``walSegmentMessages``
        within ``walFlushInterval``) and messages keep coming, a batch waits for
        ``maxMessagesPerBatch`` rows, at most ``walBatchDelay`` s after its
        oldest segment became durable; a slower stream is planned at once.
        """
        o = self.options
        if o.wal_batch_delay <= 0 or self._paused or not self._flooding:
            return False
        if max_rows is not None and self._index.rows_after(begin) >= max_rows:
            return False
        now = time.monotonic()
        busy = self._buffer or self._writing or now - self._last_arrival < o.wal_flush_interval
        if not busy:
            return False
        oldest = min((t for n, t in self._durable_at.items() if n >= begin[0]), default=0.0)
        return now - oldest < o.wal_batch_delay

    def _wait_quiet(self) -> None:
        """Trigger.AvailableNow: wait until no message arrived for the idle timeout."""
        o = self.options
        wait_subscribed(self._consumers, o.start_timeout)
        while self._failure is None:
            quiet = time.monotonic() - max(self._last_arrival, self._started_at)
            pending = self._buffer or self._writing
            if quiet >= o.available_now_idle_timeout and not pending:
                return
            if quiet >= o.start_timeout + o.available_now_idle_timeout:
                return
            gevent.sleep(min(0.05, max(0.001, o.available_now_idle_timeout - quiet)))

    def _partitions(
        self, start: Mapping[str, Any], end: Mapping[str, Any]
    ) -> list[NSQWalPartition]:
        self._check()
        begin, stop = position(start), position(end)
        assert begin is not None and stop is not None
        slices = self._index.slices(begin, stop)
        groups = split_slices(slices, self.options.num_partitions)
        location = self.store.location
        return [NSQWalPartition(i, location, self.options.topic, g) for i, g in enumerate(groups)]

    def _commit(self, end: Mapping[str, Any]) -> int:
        stop = position(end)
        assert stop is not None
        gone = self._index.drop_before(stop[0])
        for segment in gone:
            self._durable_at.pop(segment.number, None)
        if gone:
            gevent.get_hub().threadpool.spawn(self.store.delete, gone).get()
        self._update_flow()
        return sum(s.rows for s in gone)

    def _report_latest(self) -> dict[str, int]:
        index = self._index
        return {
            **offset(index.end()),
            "walRows": index.rows_after(index.first()),
            "walBytes": index.size,
            "buffered": len(self._buffer) + self._writing,
        }

    # -- Spark's API (Spark's thread; the rest is the shell's) ---------------------

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read the WAL and what arrives until the topic goes quiet.

        The end is fixed at the first batch, once no message arrived for
        ``availableNowIdleTimeout`` seconds; later messages stay in the
        WAL for the next run.
        """
        self._available_now = True

    def _read(self, partition: NSQWalPartition) -> Iterator[pa.RecordBatch]:
        """The partition's slices of segment files (on an executor)."""
        return read_partition(partition)
