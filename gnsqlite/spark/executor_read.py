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
   share: until it has it, no message arrived for ``readIdleTimeout`` s
   (checked every ``readIdleTimeout`` s, so a read ends between one and two
   of them after the last message), or ``readTimeout`` s passed.
   Redeliveries (``attempts`` > 1) whose id is in a recent segment are
   FINished and dropped (their row was written by a task that died before
   its FINs); with ``maxAttempts``, a message past it is FINished and
   dropped with a WARNING;
3. the rows are written as the segment, atomically and only if no other
   attempt wrote it first (:meth:`~gnsqlite.spark.wal.WalStore.write_first`);
4. the winner FINishes its messages once the segment is durable and
   yields its rows while nsqd works through the FINs (the connections'
   ``CLS``/``CLOSE_WAIT`` is waited for after the last row, so the task
   ends only once nsqd has handled every FIN); a loser gives its messages
   back (``REQ 0``), closes, and yields the winner's rows.

The taker holds :class:`~gnsqlite.connection.Connection` objects itself, not a
:class:`~gnsqlite.consumer.Consumer`: a share is one RDY per connection
(a message is only ever taken, never handled, so there is no flow control
to run), each message arrives undecoded, as its frame's data
(``message_class=bytes``), and is appended to its connection's list; the
rows are cut from those frames by Arrow's kernels
(:func:`~gnsqlite.spark.arrow_rows.frame_rows`), a message is decoded one
at a time only when the ``attempts`` column shows a redelivery, and each
connection's FINs go out as one write.

Spark's Python worker runs a full garbage collection after every task,
which walks every object the worker holds: PySpark's, pyarrow's, gevent's
and this package's, tens of thousands that live as long as the worker. At
the first read in a Spark task of a worker process, :func:`read_share`
collects once and freezes them (:func:`gc.freeze`), so the collection after
each later task walks only what later tasks create. A process that calls
:func:`read_share` outside a Spark task (a test, a benchmark) is left alone.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import struct
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import gevent
import gevent.event
import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.taskcontext import TaskContext

from ..connection import Connection
from ..errors import NSQConnectionError, NSQError
from ..protocol.frames import MESSAGE_HEADER_SIZE
from ._hub import HubThread
from .arrow_rows import frame_rows, with_topic
from .consuming import rdy_shares
from .options import SourceOptions
from .planning import SEGMENT_PREFIX, segment_name
from .wal import WalStore

__all__ = ["FAULT", "NSQSharePartition", "ShareTaker", "read_share"]

log = logging.getLogger(__name__)

#: Test hook: ``<stage>:<file>`` in this environment variable makes the first worker to
#: reach ``stage`` (``taken``: its share taken, before the segment write; ``written``: the
#: segment written, before the FINs) create ``file`` and SIGKILL itself. Once ``file``
#: exists, nothing happens.
FAULT = "GNSQLITE_SPARK_FAULT"

#: Segments whose ids a worker process keeps in memory for redelivery checks.
_ID_CACHE_SIZE = 64
_ids_cache: OrderedDict[str, frozenset[bytes]] = OrderedDict()

#: The process whose objects :func:`_freeze_worker_objects` froze (0: none yet).
_frozen_in = 0


class NSQSharePartition(InputPartition):
    """One partition of a batch read on the executors: ``share`` messages from ``nsqd``.

    Pickled to an executor with the source's options; ``batch`` and
    ``index`` name its segment.
    """

    def __init__(
        self, index: int, batch: int, nsqd: str, share: int, options: SourceOptions
    ) -> None:
        super().__init__(index)
        self.index = index
        self.batch = batch
        self.nsqd = nsqd
        self.share = share
        self.options = options

    def __repr__(self) -> str:
        return (
            f"<NSQSharePartition {self.index} of batch {self.batch}: {self.share} messages"
            f" from {self.nsqd}>"
        )

    @property
    def segment(self) -> str:
        """The file name of this partition's segment."""
        return segment_name(self.batch, self.index)


def read_share(
    partition: NSQSharePartition, store: WalStore | None = None
) -> Iterator[pa.RecordBatch]:
    """The partition's rows as the source's record batches (see the module doc). Blocks."""
    o = partition.options
    assert o.wal_location is not None
    if _frozen_in != os.getpid() and TaskContext.get() is not None:
        _freeze_worker_objects()
    store = store if store is not None else WalStore(o.wal_location)
    if store.exists(partition.segment):
        yield from _batches(store.read_file(partition.segment), o.topic)
        return
    hub = HubThread(f"gnsqlite-read-{partition.batch}-{partition.index}")
    hub.start()
    taker = ShareTaker(o, partition.nsqd, partition.share, store, partition.segment)
    try:
        # The rows go to Spark while nsqd works through the FINs and answers CLS:
        # the close is waited for after the last row, before the task can end.
        yield from _batches(_take(partition, store, hub, taker), o.topic)
    finally:
        try:
            hub.call(taker.close, timeout=o.stop_timeout + 10.0)
        finally:
            hub.stop()


def _batches(rows: pa.Table | pa.RecordBatch, topic: str) -> Iterator[pa.RecordBatch]:
    """``rows`` (a segment's or a take's) as the source's record batches, ``topic`` added."""
    for batch in rows.to_batches() if isinstance(rows, pa.Table) else [rows]:
        yield with_topic(batch, topic)


def _freeze_worker_objects() -> None:
    """In a Spark worker, once: collect, then freeze what it holds (see the module doc).

    Blocks for one full collection. ``pyarrow.compute`` (imported by the
    first read's timestamp cast) is imported first, so its objects are
    frozen too. Objects alive now that become cyclic garbage later are
    never collected: one task's worth at most, once per worker.
    """
    global _frozen_in
    import pyarrow.compute  # noqa: F401  # the read's cast imports it; freeze it with the rest

    _frozen_in = os.getpid()
    gc.collect()
    gc.freeze()


def _take(
    partition: NSQSharePartition, store: WalStore, hub: HubThread, taker: ShareTaker
) -> pa.Table | pa.RecordBatch:
    """Take the share from nsqd, write the segment, FIN or give back; the rows that won.

    The winner's FINs are queued and its connections' closes started (each
    ``CLS`` behind its FINs) before this returns; the caller waits for the
    connections to end (``taker.close``).
    """
    rows = hub.call(taker.take)
    _fault("taken")
    if store.write_first(partition.segment, rows):
        _fault("written")
        hub.call(taker.finish)
        return rows
    log.info(
        "%r: another attempt wrote the segment first; giving back %d messages",
        partition,
        rows.num_rows,
    )
    hub.call(taker.give_back)
    return store.read_file(partition.segment)


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


#: A message's frame data: its attempts and id after the 8-byte timestamp, then the body.
_ATTEMPTS_AND_ID = struct.Struct(">H16s")
_ID = slice(MESSAGE_HEADER_SIZE - 16, MESSAGE_HEADER_SIZE)


def _attempts_and_id(frame: bytes) -> tuple[int, bytes]:
    """A taken message's attempts and 16-byte id, from its frame data."""
    return _ATTEMPTS_AND_ID.unpack_from(frame, 8)


class _Link:
    """One connection of a taker and the messages it took: at most ``cap``, its RDY.

    ``taken`` holds each message's frame data (header, then body); it is
    the list the connection's receiver appends to; it is emptied in place
    (:meth:`keep`, :meth:`drop`), never rebound: the receiver holds it, and
    the connection holds the receiver in a reference cycle, so a list
    rebound away would keep its messages alive until Python's cyclic
    garbage collector runs (Spark's worker runs a full one after each task,
    whose time grows with the objects it frees).
    """

    connection: Connection  # set by the taker right after the link is made

    def __init__(self) -> None:
        self.cap = 0
        self.taken: list[bytes] = []

    def keep(self, messages: list[bytes]) -> None:
        """Keep only ``messages`` (some of :attr:`taken`)."""
        self.taken[:] = messages

    def drop(self) -> list[bytes]:
        """Empty :attr:`taken`; what it held, in a new list."""
        taken = self.taken[:]
        self.taken.clear()
        return taken


class ShareTaker:
    """Takes up to ``share`` messages of one nsqd and answers them; runs in a hub thread.

    Every method runs in the hub (through :meth:`HubThread.call`); the
    constructor opens nothing. ``nsqd`` is the ``host:port`` TCP address.
    """

    def __init__(
        self, options: SourceOptions, nsqd: str, share: int, store: WalStore, segment: str
    ) -> None:
        self.options = options
        self.nsqd = nsqd
        self.share = share
        self.store = store
        self.segment = segment
        self._links: list[_Link] = []
        self._taking = False
        self._full: gevent.event.Event | None = None  # made in the hub, by take()
        self._unfilled = 0  # links whose cap is not reached yet
        self._closing: list[gevent.Greenlet[..., None]] = []  # connections' close(), under way

    def take(self) -> pa.RecordBatch:
        """Subscribe and take up to the share (bounded by the read timeouts); the rows.

        Blocks, in the hub. The rows are of :data:`~gnsqlite.spark.arrow_rows.ROW_SCHEMA`,
        less redeliveries already in a recent segment and messages past
        ``maxAttempts`` (both FINished), and less the messages of a
        connection that broke meanwhile (nsqd redelivers those).
        """
        o = self.options
        started = time.monotonic()
        full = self._full = gevent.event.Event()
        subscribe_within = min(o.start_timeout, o.read_timeout)
        first = self._connect(subscribe_within)
        more = -(-self.share // first.max_rdy_count) - 1  # each connection's RDY fits nsqd's max
        connecting = [gevent.spawn(self._connect, subscribe_within) for _ in range(more)]
        try:
            gevent.joinall(connecting, raise_error=True)
        finally:
            gevent.killall(connecting)  # the others, when one failed
        self._unfilled = len(self._links)
        self._taking = True
        for link, cap in zip(self._links, rdy_shares(self.share, len(self._links)), strict=True):
            link.cap = cap
            link.connection.ready(cap)
        deadline = started + o.read_timeout
        seen = -1
        while not full.is_set():
            left = deadline - time.monotonic()
            now = sum(len(link.taken) for link in self._links)
            if left <= 0 or now == seen:  # the deadline, or no message for a whole wait
                break
            seen = now
            full.wait(min(left, o.read_idle_timeout))
        self._taking = False
        for link in self._links:
            if not link.connection.closed:
                link.connection.ready(0)
        return self._rows()

    def _connect(self, timeout: float) -> Connection:
        """One more subscribed connection to the nsqd, at RDY 0 (blocks up to ``timeout`` s)."""
        o = self.options
        link = _Link()
        connection = link.connection = Connection(
            self.nsqd, o.connection, on_message=self._receiver(link), message_class=bytes
        )
        self._links.append(link)  # closed by close(), whatever happens next
        failed = NSQConnectionError(
            self.nsqd, f"could not subscribe to {o.topic}/{o.channel} within {timeout} s"
        )
        with gevent.Timeout(timeout, failed):
            connection.connect()
            connection.subscribe(o.topic, o.channel)
        return connection

    def _receiver(self, link: _Link) -> Callable[[Connection, bytes], None]:
        """``on_message`` of ``link``'s connection: keep the message; count the link full."""
        taken = link.taken
        append = taken.append

        def receive(connection: Connection, frame: bytes) -> None:
            if not self._taking:  # after the read ended: back at once
                _answer(connection, connection.requeue, frame[_ID])
                return
            append(frame)
            if len(taken) == link.cap:
                self._unfilled -= 1
                if not self._unfilled and self._full is not None:
                    self._full.set()

        return receive

    def _rows(self) -> pa.RecordBatch:
        """The rows of what was taken, less what :meth:`take` says.

        Built at once from every link's messages; only when the rows'
        ``attempts`` show a redelivery are the links looked at one message
        at a time and the rows built again without what they drop.
        """
        import pyarrow.compute as pc  # imported by the executors only (the planner needs none)

        taken: list[bytes] = []
        for link in self._links:
            if link.connection.closed:  # broke: nothing can be answered, nsqd redelivers
                link.drop()
                continue
            taken += link.taken
        rows = frame_rows(taken, self.nsqd)
        if not taken or pc.max(rows.column("attempts")).as_py() == 1:
            return rows
        recent: list[frozenset[bytes]] | None = None
        taken = []
        for link in self._links:
            if any(_attempts_and_id(frame)[0] != 1 for frame in link.taken):
                if recent is None:
                    recent = gevent.get_hub().threadpool.spawn(self._recent_ids).get()
                link.keep(self._drop_answered(link, recent or []))
            taken += link.taken
        return frame_rows(taken, self.nsqd)

    def _drop_answered(self, link: _Link, recent: list[frozenset[bytes]]) -> list[bytes]:
        """``link``'s messages less redeliveries in a segment or past ``maxAttempts``: FINished."""
        o = self.options
        limit = o.max_attempts or None
        fields = list(map(_attempts_and_id, link.taken))
        written = {
            wire_id
            for attempts, wire_id in fields
            if attempts != 1 and any(wire_id in ids for ids in recent)
        }
        given_up = {
            wire_id for attempts, wire_id in fields if limit is not None and attempts > limit
        } - written
        if written:
            log.info(
                "%s/%s: %d redelivered messages were already in the WAL: finished",
                o.topic,
                o.channel,
                len(written),
            )
        if given_up:
            log.warning(
                "%s/%s: %d messages past maxAttempts=%s finished without a row",
                o.topic,
                o.channel,
                len(given_up),
                limit,
            )
        drop = written | given_up
        if not drop:
            return link.taken
        _answer(link.connection, link.connection.finish_many, sorted(drop))
        return [frame for frame in link.taken if frame[_ID] not in drop]

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
        """The segment is durable: FIN every message in it, one write a connection; close.

        Returns once the FINs are queued and the connections' closes started
        (each ``CLS`` behind its FINs); :meth:`close` waits for them to end
        (nsqd has handled every FIN when it answers ``CLS``).
        """
        for link in self._links:
            ids = [frame[_ID] for frame in link.drop()]
            _answer(link.connection, link.connection.finish_many, ids)
        self._start_closing()

    def give_back(self) -> None:
        """Another attempt's segment won: ``REQ 0`` every message taken, then close."""
        self.close()

    def close(self) -> None:
        """``REQ 0`` what is unanswered, close the connections (CLS first). Safe twice; blocks."""
        self._start_closing()
        closing, self._closing = self._closing, []
        gevent.joinall(closing, raise_error=True)

    def _start_closing(self) -> None:
        """``REQ 0`` what is unanswered and start closing every connection; does not block."""
        self._taking = False
        links, self._links = self._links, []
        for link in links:
            for frame in link.drop():
                _answer(link.connection, link.connection.requeue, frame[_ID])
        timeout = self.options.stop_timeout
        self._closing += [gevent.spawn(link.connection.close, timeout) for link in links]


def _answer(connection: Connection, command: Callable[[Any], None], argument: Any) -> None:
    """``command(argument)`` (FIN or REQ) on ``connection``; on a broken one, nsqd redelivers."""
    if connection.closed:
        return
    try:
        command(argument)
    except NSQError as exc:
        log.warning("%s: answering failed, nsqd redelivers: %s", connection.name, exc)
