"""The source with ``readOn=executors``: the driver plans, every executor reads NSQ itself.

:class:`NSQExecutorStreamReader` lives in the Python process Spark starts on
the driver for the query's source, but consumes nothing: it finds the nsqd
of the topic (``nsqdTcpAddresses`` with ``nsqdHttpAddresses``, and/or
nsqlookupd), asks each for the channel's ``depth`` and ``in_flight_count``
(HTTP ``/stats``, from a :class:`~gnsqlite.spark._hub.HubThread`), and plans
a batch only when some nsqd has a depth: up to ``maxMessagesPerBatch``
messages cut into shares (:mod:`gnsqlite.spark.planning`), one Spark
partition each. The executors take the shares
(:mod:`gnsqlite.spark.executor_read`): each writes its segment under
``walLocation`` before it FINishes, so a replayed batch reads the same
rows, and a redelivery of a written message is dropped.

Offsets are ``{"batch", "shares"}``: the plan itself, so a restarted query
replays its last batch into the same partitions. ``commit`` deletes the
segments of committed batches once nsqd can no longer redeliver their
messages (older than ``msgTimeout`` + ``readTimeout`` + a margin): until then
they serve the redelivery check.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

import gevent
import pyarrow as pa

from ..errors import NSQError
from ..http import HTTPError, LookupdClient, NsqdHTTPClient
from .executor_read import NSQSharePartition, read_share
from .options import SourceOptions
from .planning import SEGMENT_PREFIX, Backlog, BatchPlan, plan_shares, segment_batch
from .shell import SourceShell

__all__ = ["EXECUTORS_WARNING", "NSQExecutorStreamReader", "RETENTION_MARGIN"]

log = logging.getLogger(__name__)

#: Logged once per query, when the source with ``readOn=executors`` starts.
EXECUTORS_WARNING = (
    "nsq source %s/%s reads on the executors (readOn=executors): each task of a batch"
    " subscribes and takes its share, writes it to the WAL at %s and FINishes it once"
    " durable: exactly-once with an idempotent sink"
)

#: Seconds a committed batch's segments are kept beyond nsqd's message timeout.
RETENTION_MARGIN = 30.0

#: nsqd's default ``--msg-timeout``, in seconds, when option ``msgTimeout`` is not set.
NSQD_MSG_TIMEOUT = 60.0

#: Seconds between two ``/stats`` rounds while they find nothing to plan: Spark asks for
#: the next batch every few milliseconds while there is none.
IDLE_POLL = 0.1


class NSQExecutorStreamReader(SourceShell):
    """The ``nsq`` streaming source with ``readOn=executors``; Spark calls it, users do not.

    The constructor starts nothing: the hub thread starts at Spark's first
    call (:class:`~gnsqlite.spark.shell.SourceShell`). Spark pickles this
    object to the executors for :meth:`read`; only the options travel.
    """

    partition_type = NSQSharePartition
    hub_name = "gnsqlite-planner"
    warning = EXECUTORS_WARNING

    def __init__(self, options: SourceOptions) -> None:
        if options.wal_location is None:
            raise ValueError("NSQExecutorStreamReader needs option walLocation")
        super().__init__(options)
        self._available_now = False
        self._available_now_left: int | None = None
        self._idle_since: float | None = None  # time.monotonic() of the last round with nothing

    # -- the mode's hooks (in the hub) -----------------------------------------------

    def _nsqd(self) -> list[tuple[str, str]]:
        """``(tcp, http)`` of each nsqd of the topic: the options', then lookupd's."""
        o = self.options
        found = dict(zip(o.nsqd_tcp_addresses, o.nsqd_http_addresses, strict=True))
        for address in o.lookupd_http_addresses:
            try:
                producers = LookupdClient(address).lookup(o.topic).get("producers", [])
            except NSQError as exc:
                log.warning("%r: lookupd %s failed: %s", self, address, exc)
                continue
            for p in producers:
                host = p["broadcast_address"]
                found.setdefault(f"{host}:{p['tcp_port']}", f"{host}:{p['http_port']}")
        return list(found.items())

    def _backlogs(self) -> list[Backlog]:
        """Each nsqd's depth and in-flight count of the channel (created where missing)."""
        o = self.options
        out = []
        for tcp, http in self._nsqd():
            client = NsqdHTTPClient(http)
            try:
                channel = _channel_stats(client, o.topic, o.channel)
                if channel is None:  # keep what the topic gets from now on for this channel
                    client.create_topic(o.topic)  # nsqd creates no channel of a missing topic
                    client.create_channel(o.topic, o.channel)
                    channel = _channel_stats(client, o.topic, o.channel) or {}
            except NSQError as exc:
                log.warning("%r: /stats of %s failed: %s", self, http, exc)
                continue
            out.append(
                Backlog(tcp, int(channel.get("depth", 0)), int(channel.get("in_flight_count", 0)))
            )
        return out

    def _initial(self) -> dict[str, Any]:
        self._backlogs()  # creates the channel, so messages published from now on are kept
        return BatchPlan(0, ()).offset()

    def _latest(
        self, start: Mapping[str, Any] | None, max_rows: int | None, min_rows: int | None
    ) -> dict[str, Any]:
        previous = BatchPlan.from_offset(start)
        if self._idle_since is not None:
            gevent.sleep(max(0.0, self._idle_since + IDLE_POLL - time.monotonic()))
        self._idle_since = time.monotonic()
        backlogs = self._backlogs()
        if self._available_now:
            if self._available_now_left is None:
                self._available_now_left = sum(b.available for b in backlogs)
            left = self._available_now_left
            max_rows = left if max_rows is None else min(max_rows, left)
            if max_rows <= 0:
                return previous.offset()
        if min_rows is not None and sum(b.depth for b in backlogs) < min_rows:
            return previous.offset()
        shares = plan_shares(backlogs, max_rows, self.options.num_partitions)
        if not shares:
            return previous.offset()
        self._idle_since = None
        plan = BatchPlan(previous.batch + 1, tuple(shares))
        if self._available_now_left is not None:
            self._available_now_left -= plan.rows
        return plan.offset()

    def _partitions(
        self, start: Mapping[str, Any], end: Mapping[str, Any]
    ) -> list[NSQSharePartition]:
        """One partition per share of the batch ``end`` plans (none for an empty batch)."""
        plan = BatchPlan.from_offset(end)
        if plan.batch == BatchPlan.from_offset(start).batch:
            return []
        return [
            NSQSharePartition(i, plan.batch, address, share, self.options)
            for i, (address, share) in enumerate(plan.shares)
        ]

    def _commit(self, end: Mapping[str, Any]) -> int:
        """Delete the segments of batches up to ``end`` nsqd can no longer redeliver."""
        last = BatchPlan.from_offset(end).batch
        o = self.options
        keep = (o.connection.msg_timeout or NSQD_MSG_TIMEOUT) + o.read_timeout + RETENTION_MARGIN
        now = time.time()
        gone = []
        for info in self.store.listing(SEGMENT_PREFIX):
            batch = segment_batch(info.base_name)
            mtime = info.mtime.timestamp() if info.mtime is not None else now
            if batch is not None and batch <= last and now - mtime > keep:
                gone.append(info.base_name)
        self.store.delete_names(gone)
        return len(gone)

    # -- Spark's API (Spark's thread; the rest is the shell's) ---------------------

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read what the channel holds at the first batch, then end."""
        self._available_now = True

    def _read(self, partition: NSQSharePartition) -> Iterator[pa.RecordBatch]:
        """Take the partition's share from nsqd, or read its segment (on an executor)."""
        return read_share(partition)


def _channel_stats(client: NsqdHTTPClient, topic: str, channel: str) -> dict[str, Any] | None:
    """The ``/stats`` entry of ``topic``/``channel``, ``None`` if nsqd has no such channel."""
    try:
        stats = client.stats(topic, channel)
    except HTTPError as exc:
        if exc.status == 404:  # TOPIC_NOT_FOUND
            return None
        raise
    for entry in stats.get("topics") or []:
        if entry.get("topic_name") == topic:
            for c in entry.get("channels") or []:
                if c.get("channel_name") == channel:
                    return dict(c)
    return None
