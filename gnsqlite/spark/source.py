"""The streaming source: an NSQ channel read by Spark Structured Streaming.

:class:`NSQStreamReader` lives in the Python process Spark starts on the
driver for a query's source. Its consumers (``connectionsPerNsqd`` of
them, each a :class:`~gnsqlite.consumer.Consumer` with a share of
``maxInFlight``, so nsqd's per-connection RDY cap does not cap a batch)
run in a :class:`~gnsqlite.spark._hub.HubThread` (its own thread and
gevent hub), so nsqd's heartbeats are answered and held messages are
touched while Spark is busy. Every message is answered asynchronously: it
stays in flight at nsqd until Spark commits the batch that carried it.

Messages reach the source in lists (the consumer's batch path,
:mod:`gnsqlite.consumer.batch`: no handler greenlet switch per message) and their
Arrow rows are built as they arrive (:class:`~gnsqlite.spark.arrow_rows.RowCache`),
while Spark runs the previous batch. Spark's calls then cost no Python
step per message: a batch is a slice of lists (:class:`~gnsqlite.spark.ledger.Ledger`),
its rows travel to the executors inside its :class:`NSQPartition` objects
as Arrow IPC, and :meth:`NSQStreamReader.read` only unpacks them into
record batches (it opens no connection). A committed batch's FINs go out
after :meth:`NSQStreamReader.commit` returned, a few writes per connection
(:func:`~gnsqlite.message.finish_all`), from a greenlet of the hub. See
:mod:`gnsqlite.spark` for the guarantees.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

import gevent
import gevent.event
import pyarrow as pa

from ..connection import Connection
from ..consumer import Consumer
from ..errors import NSQConnectionError
from ..message import Message, finish_all
from .arrow_rows import NSQPartition, RowCache, message_rows, pack_rows, split_rows, unpack_rows
from .consuming import (
    await_fill,
    close_all,
    hold_first_batch,
    rdy_shares,
    set_rdy,
    source_consumer,
    wait_subscribed,
)
from .flood import FLOOD_WINDOW, FloodMeter
from .ledger import Ledger
from .options import SourceOptions
from .shell import SourceShell

__all__ = ["NO_WAL_WARNING", "NSQStreamReader"]

log = logging.getLogger(__name__)

#: Logged once per query, when the source without ``walLocation`` starts.
NO_WAL_WARNING = (
    "nsq source %s/%s runs without walLocation: at-least-once (messages are held unfinished"
    " at nsqd until Spark commits their batch; a stop or a failure delivers up to two batches"
    " again) and slower than with a write-ahead log. For exactly-once at full speed set option"
    " walLocation to a directory every executor can read, one per query, e.g."
    ' .option("walLocation", "hdfs:///nsq-wal/<query>")'
)

#: Received messages reach the source at the latest this long after arriving, in seconds
#: (the consumer's ``batch_timeout``; a full list, or a starved connection, goes at once).
INTAKE_DELAY = 0.005

#: A committed batch's messages are finished this many at a time, the hub
#: serving Spark's next call and the connections between two runs.
FIN_CHUNK = 10_000


class NSQStreamReader(SourceShell):
    """The ``nsq`` streaming source without a WAL (``readOn=driver``); Spark calls it.

    The constructor starts nothing: the hub thread and the consumer start
    at Spark's first call (``initialOffset``/``latestOffset``/...), in the
    process that holds the reader (:class:`~gnsqlite.spark.shell.SourceShell`).
    Spark pickles this object to the executors for :meth:`read`; only the
    options and the session travel.
    """

    partition_type = NSQPartition
    hub_name = "gnsqlite-source"
    warning = NO_WAL_WARNING
    _pickled = ("_session",)

    def __init__(self, options: SourceOptions) -> None:
        super().__init__(options)
        self._session = f"{uuid.uuid4().hex[:16]}"
        self._consumers: list[Consumer] = []  # connectionsPerNsqd of them, sharing the RDY budget
        self._ledger: Ledger[Message] | None = None
        self._toucher: gevent.Greenlet[[], None] | None = None
        self._rows = RowCache()  # Arrow rows of the messages received, until committed
        self._finishing: deque[list[Message]] = deque()  # committed, FIN not yet sent
        self._finish_wake: gevent.event.Event | None = None
        self._finisher: gevent.Greenlet[[], None] | None = None
        self._last_arrival = 0.0  # time.monotonic() of the last message, in the hub thread
        self._arrival: gevent.event.Event | None = None  # set by each message, in the hub
        self._flood = FloodMeter()
        self._waiting_since = 0.0  # time.monotonic() since buffered messages wait for a batch
        self._started_at = 0.0
        self._cutoff_ns: int | None = None  # Trigger.AvailableNow: take messages up to this

    def __repr__(self) -> str:
        o = self.options
        return f"<NSQStreamReader {o.topic}/{o.channel} session={self._session}>"

    # -- hub-thread side: the mode's hooks -------------------------------------------

    def _start(self) -> None:
        o = self.options
        self._ledger = Ledger(self._session)
        self._rows = RowCache()
        self._arrival = gevent.event.Event()
        self._finish_wake = gevent.event.Event()
        self._started_at = time.monotonic()
        # nsqd caps each connection's RDY at its --max-rdy-count, and treats
        # every connection as a client of the channel: several consumers,
        # each with a share of the budget, lift the cap on a batch.
        self._consumers = [
            source_consumer(
                o,
                None,
                share,
                on_batch=self._on_batch,
                batch_size=share,
                batch_timeout=INTAKE_DELAY,
            )
            for share in rdy_shares(o.max_in_flight, o.connections_per_nsqd)
        ]
        for consumer in self._consumers:
            consumer.start()
        self._toucher = gevent.spawn(self._touch_loop)
        self._finisher = gevent.spawn(self._finish_loop)
        log.info(
            "%r: consuming with max_in_flight=%d over %d connections per nsqd",
            self,
            o.max_in_flight,
            o.connections_per_nsqd,
        )

    def _stop(self) -> None:
        """Spark ends the query: requeue every unfinished message, close (in the hub).

        Messages of batches Spark has not committed to the source (at least
        the last batch, see :mod:`gnsqlite.spark`) go back to nsqd with
        ``REQ 0`` and are delivered again to the next run.
        """
        if self._toucher is not None:
            self._toucher.kill()
        if self._finisher is not None:
            self._finisher.kill()
        while self._finishing:  # committed by Spark: FIN, never give back
            finish_all(self._finishing.popleft())
        consumers = self._consumers
        # RDY 0 first: nsqd would hand a message requeued with REQ 0
        # straight back to this connection while its RDY is open.
        set_rdy(consumers, 0)
        released = self._ledger.release() if self._ledger is not None else []
        for message in released:
            message.requeue(0.0, backoff=False)
        if released:
            log.info("%r: stopping; requeued %d unfinished messages", self, len(released))
        close_all(consumers, self.options.stop_timeout)

    def _on_batch(self, messages: list[Message]) -> None:
        """Take what the consumer received (its worker greenlet, in the hub); never blocks.

        The source answers every message itself: FIN once Spark committed
        its batch, ``REQ 0`` when it gives it back.
        """
        for message in messages:
            message.enable_async()
        self._last_arrival = now = time.monotonic()
        self._flood.arrived(len(messages), now)
        if self._arrival is not None:
            self._arrival.set()
        if self._ledger is None or self._stopped:
            for message in messages:
                message.requeue(0.0, backoff=False)
            return
        if not self._ledger.buffered:
            self._waiting_since = now
        if self._cutoff_ns is None:  # Trigger.AvailableNow takes messages out of order
            self._rows.add(messages)
        self._ledger.receive_many(messages)

    def _touch_loop(self) -> None:
        """TOUCH held messages before nsqd's timeout, while Spark is busy or idle.

        A round every quarter of the shortest ``msg_timeout`` of the
        connections (every 0.2 s while there is none, so the first messages
        of a new connection are seen at once); a message is touched once
        less than half of its own ``msg_timeout`` is left.
        """
        while True:
            gevent.sleep(self._touch_interval())
            if self._ledger is None:
                continue
            for message in self._ledger.held():
                if not message.has_responded and message.time_left() < message.msg_timeout / 2:
                    message.touch()

    def _finish_loop(self) -> None:
        """FIN what Spark committed, :data:`FIN_CHUNK` messages at a time (in the hub).

        A list leaves the queue only once all of it is answered; stopping
        finishes what is left (:func:`~gnsqlite.message.finish_all` skips
        what is answered).
        """
        wake = self._finish_wake
        assert wake is not None
        while True:
            wake.wait()
            wake.clear()
            while self._finishing:
                messages = self._finishing[0]
                for i in range(0, len(messages), FIN_CHUNK):
                    finish_all(messages[i : i + FIN_CHUNK])
                    gevent.sleep(0)
                self._finishing.popleft()

    def _touch_interval(self) -> float:
        """Seconds to the next touch round (see :meth:`_touch_loop`)."""
        conns = self._connections()
        if not conns:
            # Not the option's msg_timeout (60 s by default): nsqd's may be far
            # shorter, and messages arrive as soon as a connection subscribes.
            return 0.2
        return max(0.2, min(conn.msg_timeout for conn in conns) / 4)

    def _connections(self) -> list[Connection]:
        return [conn for c in self._consumers for conn in c.connections]

    def _connected(self) -> bool:
        return any(c.connections for c in self._consumers)

    def _first_connection(self) -> None:
        o = self.options
        if wait_subscribed(self._consumers, o.start_timeout if o.nsqd_tcp_addresses else 0.0):
            return
        if o.nsqd_tcp_addresses and not o.lookupd_http_addresses:
            raise NSQConnectionError(
                ",".join(o.nsqd_tcp_addresses),
                f"the nsq source could not subscribe to {o.topic}/{o.channel} within"
                f" startTimeout={o.start_timeout} s; check nsqdTcpAddresses",
            )

    def _latest(
        self, start: Mapping[str, Any] | None, max_rows: int | None, min_rows: int | None
    ) -> dict[str, Any]:
        ledger = self._ledger
        assert ledger is not None
        cutoff = self._cutoff_ns
        if cutoff is not None:
            self._wait_available_now(max_rows)
            return ledger.latest(start, max_rows, lambda m: m.timestamp <= cutoff)
        if min_rows is not None and len(ledger.buffered) < min_rows and not ledger.uncommitted:
            return dict(start) if start is not None else ledger.offset()
        if start is not None and ledger.tick == 0:  # the session's first batch
            if self.options.wal_batch_delay > 0:
                assert self._arrival is not None
                hold_first_batch(
                    lambda: bool(ledger.buffered),
                    self._arrival,
                    lambda: self._filling(max_rows),
                    lambda: self._await_fill(max_rows),
                    lambda: self._stopped,
                    settle=FLOOD_WINDOW,
                )  # a connection's first RDY is 1
        elif start is not None and self._filling(max_rows) and not self._await_fill(max_rows):
            return dict(start)
        end = ledger.latest(start, max_rows)
        self._waiting_since = time.monotonic()  # for what is left buffered
        return end

    def _budget(self) -> int:
        """Messages nsqd may still send: the RDY budget (capped per connection) less the held."""
        ledger = self._ledger
        assert ledger is not None
        conns = self._connections()
        capacity = min(self.options.max_in_flight, sum(c.max_rdy_count for c in conns) or 1)
        return max(1, capacity - ledger.uncommitted)

    def _filling(self, max_rows: int | None) -> bool:
        """Hold the next batch back while a flood fills it (see ``walBatchDelay``).

        Each micro-batch costs Spark a fixed planning and scheduling time;
        while a backlog drains, planning whatever arrived at every trigger
        makes small batches whose overhead takes the CPU ingestion needs. So
        while messages arrive at a flood's rate (:mod:`gnsqlite.spark.flood`),
        a batch waits until it holds ``maxMessagesPerBatch`` messages, or as
        many as nsqd may send on top of the uncommitted ones, or until its
        oldest message waited ``walBatchDelay`` seconds.
        """
        o = self.options
        ledger = self._ledger
        assert ledger is not None
        buffered = len(ledger.buffered)
        if o.wal_batch_delay <= 0 or not buffered:
            return False
        wanted = max_rows if max_rows is not None else o.max_messages_per_batch
        if buffered >= min(wanted, self._budget()):
            return False
        now = time.monotonic()
        return self._flood.flooding(now) and now - self._waiting_since < o.wal_batch_delay

    def _await_fill(self, max_rows: int | None) -> bool:
        """Wait (in the hub) up to :data:`HOLD_WAIT` s: ``True`` once :meth:`_filling` ends."""
        arrival = self._arrival
        assert arrival is not None
        return await_fill(
            lambda: self._filling(max_rows), arrival, FLOOD_WINDOW, lambda: self._stopped
        )

    def _wait_available_now(self, max_rows: int | None) -> None:
        """Trigger.AvailableNow: wait until a batch is full or the topic went quiet.

        Sleeps on the arrival Event (set by every message) until the quiet
        time is up; each arrival wakes it to check the batch again.
        """
        ledger = self._ledger
        arrival = self._arrival
        assert ledger is not None and arrival is not None
        o = self.options
        if not self._connected():
            wait_subscribed(self._consumers, o.start_timeout)
        wanted = max_rows if max_rows is not None else o.max_messages_per_batch
        while True:
            # nsqd sends no more than the RDY budget (capped per connection by
            # its max_rdy_count) minus what the source already holds.
            if len(ledger.buffered) >= min(wanted, self._budget()):
                return
            quiet = time.monotonic() - max(self._last_arrival, self._started_at)
            if quiet >= o.available_now_idle_timeout and self._connected():
                return
            if quiet >= o.start_timeout:
                return
            if not self._connected():
                # Nothing can arrive before a connection: wait for one (or the end).
                wait_subscribed(self._consumers, o.start_timeout - quiet)
                continue
            arrival.clear()
            arrival.wait(min(o.available_now_idle_timeout, o.start_timeout) - quiet)

    def _initial(self) -> dict[str, Any]:
        ledger = self._ledger
        assert ledger is not None
        self._first_connection()
        return ledger.initial_offset()

    def _report_latest(self) -> dict[str, Any] | None:
        ledger = self._ledger
        if ledger is None:
            return None
        return {
            "session": ledger.session,
            "seq": ledger.seq + len(ledger.buffered),
            "tick": ledger.tick,
            "buffered": len(ledger.buffered),
            "held": len(ledger.buffered) + ledger.uncommitted,
        }

    def _partitions(self, start: Mapping[str, Any], end: Mapping[str, Any]) -> list[NSQPartition]:
        ledger = self._ledger
        assert ledger is not None
        messages = ledger.batch(start, end)
        if not messages:
            return []
        low, high = ledger.seq_range(start, end)
        rows = self._rows.rows(low, high) if self._cutoff_ns is None else None
        if rows is None or len(messages) != high - low:
            rows = [message_rows(messages)]
        topic = self.options.topic
        return [
            NSQPartition(i, topic, pack_rows(part), sum(b.num_rows for b in part))
            for i, part in enumerate(split_rows(rows, self.options.num_partitions))
        ]

    def _commit(self, end: Mapping[str, Any]) -> int:
        ledger = self._ledger
        assert ledger is not None
        done = ledger.commit(end)
        self._rows.drop_before(ledger.committed_seq)
        if done:
            self._finishing.append(done)
            assert self._finish_wake is not None
            self._finish_wake.set()
        return len(done)

    # -- Spark's API (Spark's thread; the rest is the shell's) ---------------------

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read what nsqd received up to now, then end.

        Messages whose nsqd timestamp is later than this call are held back
        (and given back to nsqd when the query ends); the query ends once
        no message arrived for ``availableNowIdleTimeout`` seconds.
        """
        self._cutoff_ns = time.time_ns()

    def _read(self, partition: NSQPartition) -> Iterator[pa.RecordBatch]:
        """The rows of ``partition`` (on an executor; opens nothing)."""
        return unpack_rows(partition.data, partition.topic)
