"""The WAL source's driver side without a SparkSession: Spark's calls from a plain thread."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import gevent
import gevent.event
import pytest
from spark_support import channel_stats, drained, offset_past, publish

from gnsqlite.testing import NsqdServer, wait_until

pytest.importorskip("pyspark", reason="the spark extra (PySpark) is not installed")

from gnsqlite.spark.consuming import HOLD_WAIT
from gnsqlite.spark.options import parse_source_options
from gnsqlite.spark.wal import WalStorageError, WalStore
from gnsqlite.spark.wal_source import NSQWalStreamReader

TOPIC = "walled"
CHANNEL = "spark"


def make_reader(server: NsqdServer, wal: Path, **extra: Any) -> NSQWalStreamReader:
    # walBatchDelay 0: latestOffset plans whatever is durable (the hold has its own tests).
    options = {
        "nsqdTcpAddresses": server.tcp_address,
        "topic": TOPIC,
        "channel": CHANNEL,
        "walLocation": str(wal),
        "maxMessagesPerBatch": "100000",
        "numPartitions": "3",
        "walBatchDelay": "0",
    }
    options.update({k: str(v) for k, v in extra.items()})
    return NSQWalStreamReader(parse_source_options(options))


def bodies(reader: NSQWalStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[bytes]:
    out: list[bytes] = []
    for part in reader.partitions(start, end):
        for batch in reader.read(part):
            assert batch.schema.names == ["id", "body", "timestamp", "attempts", "topic", "nsqd"]
            assert set(batch.column("topic").to_pylist()) <= {TOPIC}
            out.extend(batch.column("body").to_pylist())
    return out


def rows_in(wal: Path) -> int:
    return sum(int(p.name.split("-")[1].split(".")[0]) for p in wal.glob("*.arrow"))


def test_messages_are_finished_once_in_the_wal_and_a_replan_reads_the_same_rows(
    nsqd: NsqdServer, tmp_path: Path
) -> None:
    wal = tmp_path / "wal"
    expected = [f"m-{i}".encode() for i in range(6000)]
    publish(nsqd, expected[:3000], TOPIC)
    reader = make_reader(nsqd, wal, maxInFlight=1000)
    try:
        start = reader.initialOffset()
        assert start == {"segment": 0, "row": 0}
        publish(nsqd, expected[3000:], TOPIC)
        # Everything is FINished at nsqd as soon as it is in the WAL, before any commit.
        wait_until(
            lambda: drained(nsqd, TOPIC, CHANNEL),
            timeout=30,
            message="the channel drained into the WAL",
        )
        assert rows_in(wal) == len(expected)
        # The backlog, as Spark's progress shows it (the source's latestOffset).
        report = reader.reportLatestOffset()
        assert report is not None and report["walRows"] == len(expected)
        assert report["walBytes"] == sum(p.stat().st_size for p in wal.glob("*.arrow")) > 0
        assert report["buffered"] == 0
        end = reader.latestOffset(start)
        first = bodies(reader, start, end)
        assert sorted(first) == sorted(expected) and len(first) == len(expected)
        assert bodies(reader, start, end) == first  # planned again: the same rows, same order
    finally:
        reader.stop()

    # A new process (a restarted driver) re-plans the uncommitted batch: same rows.
    again = make_reader(nsqd, wal)
    try:
        assert bodies(again, start, end) == first
        again.commit(end)
        assert rows_in(wal) == 0 and not list(wal.glob("*.tmp"))
        report = again.reportLatestOffset()
        assert report is not None and report["walRows"] == report["walBytes"] == 0
        assert again.latestOffset(end) == end  # nothing new
    finally:
        again.stop()
    stats = channel_stats(nsqd, TOPIC, CHANNEL)
    assert stats["requeue_count"] == 0 and stats["timeout_count"] == 0


def test_segments_written_but_never_planned_are_picked_up_by_the_next_run(
    nsqd: NsqdServer, tmp_path: Path
) -> None:
    wal = tmp_path / "wal"
    publish(nsqd, [f"a-{i}".encode() for i in range(500)], TOPIC)
    first = make_reader(nsqd, wal)
    try:
        start = first.initialOffset()
        wait_until(lambda: drained(nsqd, TOPIC, CHANNEL), timeout=30)
        planned = first.latestOffset(start)
        first.commit(planned)  # batch 0 done
        publish(nsqd, [f"b-{i}".encode() for i in range(700)], TOPIC)
        wait_until(lambda: rows_in(wal) == 700, timeout=30, message="700 rows unplanned")
    finally:
        first.stop()
    second = make_reader(nsqd, wal)
    try:
        end = second.latestOffset(planned)
        got = bodies(second, planned, end)
        assert sorted(got) == sorted(f"b-{i}".encode() for i in range(700))
    finally:
        second.stop()


def test_the_wal_bound_pauses_consumption_until_spark_commits(
    nsqd_factory: Callable[..., NsqdServer], tmp_path: Path
) -> None:
    server = nsqd_factory()
    wal = tmp_path / "wal"
    expected = [b"x%05d" % i + b"y" * 200 for i in range(3000)]
    publish(server, expected, TOPIC)
    # Segments of 100 rows are ~22 kB; a bound of 60 kB stops the flow after a few.
    reader = make_reader(server, wal, maxInFlight=100, walSegmentMessages=100, walMaxBytes=60_000)
    seen: list[bytes] = []
    try:
        start = reader.initialOffset()
        wait_until(lambda: rows_in(wal) >= 300, timeout=30)
        # Paused (RDY 0) once the WAL is above the bound: what it held went to the WAL,
        # nsqd sends nothing more and keeps the rest queued while nothing is committed.
        wait_until(
            lambda: channel_stats(server, TOPIC, CHANNEL)["in_flight_count"] == 0,
            timeout=10,
            message="nothing in flight: paused",
        )
        in_wal = rows_in(wal)
        assert 300 <= in_wal <= 600 and in_wal < len(expected)
        assert sum(p.stat().st_size for p in wal.glob("*.arrow")) > 60_000
        assert channel_stats(server, TOPIC, CHANNEL)["depth"] == len(expected) - in_wal
        # Spark catches up batch by batch; the source resumes each time.
        while len(seen) < len(expected):
            begin = start
            end = wait_until(
                partial(offset_past, reader, begin),
                timeout=30,
                message=f"more rows after {len(seen)}",
            )
            seen.extend(bodies(reader, start, end))
            reader.commit(end)
            start = end
    finally:
        reader.stop()
    assert sorted(seen) == sorted(expected)
    assert drained(server, TOPIC, CHANNEL)


def test_a_wal_storage_failure_fails_naming_the_path_and_finishes_nothing_unwritten(
    nsqd: NsqdServer, tmp_path: Path
) -> None:
    """The WAL directory is replaced by a file mid-stream (fails as root too: ENOTDIR)."""
    wal = tmp_path / "wal"
    publish(nsqd, [f"ok-{i}".encode() for i in range(400)], TOPIC)
    reader = make_reader(nsqd, wal, maxInFlight=200)
    try:
        start = reader.initialOffset()
        wait_until(lambda: drained(nsqd, TOPIC, CHANNEL), timeout=30)
        written = rows_in(wal)
        assert written == 400
        moved = tmp_path / "wal-before"
        os.rename(wal, moved)
        wal.write_text("not a directory")
        publish(nsqd, [f"lost?-{i}".encode() for i in range(600)], TOPIC)
        with pytest.raises(WalStorageError, match=str(wal)):
            wait_until(lambda: reader.latestOffset(start) and False, timeout=30, interval=0.05)
    finally:
        reader.stop()
    # Nothing that is not on disk was finished: all 600 are back at nsqd.
    stats = channel_stats(nsqd, TOPIC, CHANNEL)
    assert stats["depth"] + stats["deferred_count"] + stats["in_flight_count"] == 600
    assert rows_in(moved) == 400
    wal.unlink()
    shutil.move(moved, wal)
    assert len(WalStore(str(wal)).prepare()) >= 1


def test_a_flood_fills_batches_for_up_to_wal_batch_delay_a_trickle_is_planned_at_once(
    nsqd: NsqdServer, tmp_path: Path
) -> None:
    wal = tmp_path / "wal"
    # Segments are cut by size during the flood (the flush interval is long).
    reader = make_reader(
        nsqd, wal, maxInFlight=200, walSegmentMessages=200, walFlushInterval=0.5, walBatchDelay=1.0
    )
    stop = gevent.event.Event()

    def flood() -> None:  # 400 messages every 20 ms: segments are cut full
        n = 0
        while not stop.is_set():
            publish(nsqd, [f"f-{n + i}".encode() for i in range(400)], TOPIC)
            n += 400
            gevent.sleep(0.02)

    try:
        start = reader.initialOffset()
        began = time.monotonic()
        # The first answer waits for a first segment (up to HOLD_WAIT): none comes.
        assert reader.latestOffset(start) == start
        assert time.monotonic() - began >= HOLD_WAIT * 0.9
        feeder = gevent.spawn(flood)
        wait_until(lambda: rows_in(wal) > 0, timeout=30, interval=0.005)
        first_durable = time.monotonic()
        held = 0
        while (end := reader.latestOffset(start)) == start:
            held += 1
            assert time.monotonic() - first_durable < 5.0, "held beyond walBatchDelay"
            gevent.sleep(0.02)
        waited = time.monotonic() - first_durable
        # Held while the flood lasted, then planned at most walBatchDelay after the oldest
        # segment became durable: one batch of many segments instead of many small ones.
        # Each answer "not yet" came after waiting for the batch to fill (HOLD_WAIT), so
        # Spark's polling is a few calls, not one every 20 ms (about 40 in that time).
        assert 0.6 <= waited < 3.0
        assert 2 <= held <= waited / HOLD_WAIT + 2
        assert len(reader.partitions(start, end)) >= 1
        assert end["segment"] - start["segment"] >= 3
        stop.set()
        feeder.join(10)
        publish(nsqd, [f"last-{i}".encode() for i in range(400)], TOPIC)  # full segments
        # The flood is over (nothing arrived for walFlushInterval): planned at once.
        wait_until(lambda: drained(nsqd, TOPIC, CHANNEL), timeout=30)
        time.sleep(0.6)
        rest = reader.latestOffset(end)
        assert b"last-399" in bodies(reader, end, rest)
        reader.commit(rest)

        # A trickle (a segment cut by walFlushInterval, far from full) is never held.
        publish(nsqd, [b"t-1", b"t-2", b"t-3"], TOPIC)
        wait_until(lambda: rows_in(wal) == 3, timeout=10, interval=0.005)
        # (the file is renamed just before the source indexes it: allow for that, not
        # for a hold, which would last walBatchDelay = 1 s)
        got = wait_until(partial(offset_past, reader, rest), timeout=0.5, interval=0.005)
        assert sorted(bodies(reader, rest, got)) == [b"t-1", b"t-2", b"t-3"]
    finally:
        stop.set()
        reader.stop()


def test_a_new_querys_first_batch_waits_for_the_backlog_instead_of_planning_nothing(
    nsqd: NsqdServer, tmp_path: Path
) -> None:
    # Spark runs a new query's first batch even when latestOffset answers "no new
    # data": the first answer waits for the backlog's segments and while they fill it.
    # walFlushInterval 0.5 s: a flood is over after that long without a message; at
    # 0.05 s, two busy cores starving nsqd ended it early (1,000 or 3,000 rows, 3 runs
    # in 8 beside two busy loops).
    wal = tmp_path / "wal"
    count, per_batch = 6000, 4000
    publish(nsqd, [f"b-{i}".encode() for i in range(count)], TOPIC)
    reader = make_reader(
        nsqd,
        wal,
        maxInFlight=1000,
        walSegmentMessages=500,
        walFlushInterval=0.5,
        maxMessagesPerBatch=per_batch,
        walBatchDelay=5.0,
    )
    try:
        start = reader.initialOffset()
        # The backlog is arriving (the first answer waits 0.2 s for its first segment)
        wait_until(lambda: arrived(reader) > 0, timeout=30, message="the backlog arriving")
        end = reader.latestOffset(start)
        assert len(bodies(reader, start, end)) == per_batch
        reader.commit(end)
    finally:
        reader.stop()


def arrived(reader: NSQWalStreamReader) -> int:
    """Messages the source received so far: durable in the WAL or about to be."""
    report = reader.reportLatestOffset() or {}
    return int(report.get("walRows", 0) + report.get("buffered", 0))


class _HeldStore(WalStore):
    """A local WAL whose writes wait (in the source's worker thread) until released."""

    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.release = threading.Event()

    def write(self, number: int, batch: Any) -> Any:
        self.release.wait(30)
        return super().write(number, batch)


def test_by_default_nsqd_keeps_sending_while_a_segment_is_written(
    nsqd: NsqdServer, tmp_path: Path
) -> None:
    # nsqd caps one connection's RDY at 2500 (--max-rdy-count): the default window is two
    # connections of 2500 and a segment is half of it, so while one segment is written (and
    # its messages not yet FINished) the next one arrives instead of nsqd sending nothing.
    options = parse_source_options(
        {
            "nsqdTcpAddresses": nsqd.tcp_address,
            "topic": TOPIC,
            "channel": CHANNEL,
            "walLocation": str(tmp_path / "wal"),
        }
    )
    assert (options.max_in_flight, options.connections_per_nsqd) == (5000, 2)
    assert options.wal_segment_messages == 2500
    store = _HeldStore(str(tmp_path / "wal"))
    expected = [f"p-{i}".encode() for i in range(6000)]
    publish(nsqd, expected, TOPIC)
    reader = NSQWalStreamReader(options, store)
    try:
        start = reader.initialOffset()
        assert len(channel_stats(nsqd, TOPIC, CHANNEL)["clients"]) == 2
        # The first segment's write is held: the source still receives the whole window.
        wait_until(
            lambda: (reader.reportLatestOffset() or {}).get("buffered") == 5000,
            timeout=30,
            message="5000 messages received while a segment is written",
        )
        store.release.set()
        wait_until(lambda: drained(nsqd, TOPIC, CHANNEL), timeout=30)
        end = reader.latestOffset(start)
        assert sorted(bodies(reader, start, end)) == sorted(expected)
    finally:
        store.release.set()
        reader.stop()
