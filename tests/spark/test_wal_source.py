"""The write-ahead-logged nsq source under real PySpark (local[2]) on nsqd's default flags."""

from __future__ import annotations

import collections
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from spark_support import channel_stats, drained, publish

from gnsqlite.testing import NsqdServer, wait_until
from gnsqlite.testing.plugin import NsqCluster

pytestmark = pytest.mark.slow

TOPIC = "wal_pages"
CHANNEL = "spark"


class Sizes:
    """A foreachBatch sink keeping every body and the size of each batch."""

    def __init__(self, topic: str = TOPIC) -> None:
        self.topic = topic
        self.bodies: list[bytes] = []
        self.sizes: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = df.select("body", "topic", "attempts", "timestamp").collect()
        with self.lock:
            if rows:
                self.sizes.append(len(rows))
            for row in rows:
                assert row["topic"] == self.topic and row["attempts"] >= 1
                assert row["timestamp"] is not None
                self.bodies.append(bytes(row["body"]))

    def count(self) -> int:
        with self.lock:
            return len(self.bodies)


class Rows:
    """A foreachBatch sink keeping every (body, nsqd) pair."""

    def __init__(self) -> None:
        self.rows: list[tuple[bytes, str]] = []
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        got = [(bytes(r["body"]), r["nsqd"]) for r in df.select("body", "nsqd").collect()]
        with self.lock:
            self.rows.extend(got)

    def count(self) -> int:
        with self.lock:
            return len(self.rows)


def wal_query(
    spark: Any, tmp_path: Path, topic: str, sink: Any, available_now: bool = False, **options: Any
) -> Any:
    """Start ``topic`` (WAL under ``tmp_path``) -> foreachBatch(``sink``); ``options`` as given."""
    stream = (
        spark.readStream.format("nsq")
        .option("topic", topic)
        .option("channel", CHANNEL)
        .option("walLocation", str(tmp_path / "wal"))
        .options(**options)
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ck"))
    )
    return (stream.trigger(availableNow=True) if available_now else stream).start()


def test_wal_source_reads_batches_above_nsqds_rdy_cap_exactly_once(
    spark: Any, nsqd: NsqdServer, tmp_path: Path
) -> None:
    expected = {f"w-{i}".encode() for i in range(20_000)}
    publish(nsqd, sorted(expected), TOPIC)
    sink = Sizes()
    query = wal_query(
        spark, tmp_path, TOPIC, sink, nsqdTcpAddresses=nsqd.tcp_address, maxMessagesPerBatch=8000
    )
    try:
        wait_until(
            lambda: sink.count() >= len(expected) or query.exception(),
            timeout=180,
            interval=0.2,
            message="20,000 rows in the sink",
        )
        assert query.exception() is None
        # FINished once in the WAL: the channel drains without waiting for Spark's commits.
        wait_until(lambda: drained(nsqd, TOPIC, CHANNEL), timeout=30, interval=0.2)
        # The query's progress shows the backlog: the WAL's uncommitted rows and bytes.
        reported = [
            json.loads(s["latestOffset"])
            for p in query.recentProgress
            for s in p["sources"]
            if s.get("latestOffset")
        ]
    finally:
        query.stop()
    assert reported and all(
        r["walRows"] <= len(expected) and r["walBytes"] >= 0 and r["buffered"] >= 0
        for r in reported
    )
    assert max(r["walRows"] for r in reported) > 0
    assert len(sink.bodies) == len(expected) and set(sink.bodies) == expected
    # nsqd's default --max-rdy-count (2500) no longer bounds a batch.
    assert max(sink.sizes) > 2500 and max(sink.sizes) <= 8000
    stats = channel_stats(nsqd, TOPIC, CHANNEL)
    assert stats["requeue_count"] == 0 and stats["timeout_count"] == 0
    # Spark committed what it processed: the WAL keeps at most the last batch.
    left = list((tmp_path / "wal").glob("*.arrow"))
    assert sum(int(p.name.split("-")[1].split(".")[0]) for p in left) <= 8000


def test_wal_source_reads_three_nsqd_found_through_lookupd_exactly_once(
    spark: Any, nsq_cluster: NsqCluster, tmp_path: Path
) -> None:
    topic = "wal_cluster"
    servers = nsq_cluster.nsqds
    expected = {
        f"{i}-{n}".encode(): server.tcp_address
        for i, server in enumerate(servers)
        for n in range(3000)
    }
    for i, server in enumerate(servers):  # half before the query starts, half while it runs
        publish(server, [f"{i}-{n}".encode() for n in range(1500)], topic)
    lookupd = nsq_cluster.lookupd.http
    wait_until(
        lambda: len(lookupd.producer_addresses(topic)) == len(servers),
        timeout=10,
        message="lookupd knows the topic on all three nsqd",
    )
    sink = Rows()
    query = wal_query(
        spark,
        tmp_path,
        topic,
        sink,
        lookupdHttpAddresses=nsq_cluster.lookupd.http_address,
        lookupdPollInterval=1.0,
        maxMessagesPerBatch=2000,
    )
    try:
        wait_until(
            lambda: sink.count() >= 1500 or query.exception(),
            timeout=180,
            interval=0.2,
            message="the first rows in the sink",
        )
        for i, server in enumerate(servers):
            publish(server, [f"{i}-{n}".encode() for n in range(1500, 3000)], topic)
        wait_until(
            lambda: sink.count() >= len(expected) or query.exception(),
            timeout=180,
            interval=0.2,
            message=f"{len(expected)} rows in the sink",
        )
        assert query.exception() is None
        wait_until(
            lambda: all(drained(s, topic, CHANNEL) for s in servers),
            timeout=30,
            interval=0.2,
            message="every nsqd's channel drained",
        )
    finally:
        query.stop()
    counts = collections.Counter(body for body, _ in sink.rows)
    assert set(counts) == set(expected) and max(counts.values()) == 1
    # Each row names the nsqd it came from.
    assert all(expected[body] == nsqd for body, nsqd in sink.rows)
    for server in servers:
        stats = channel_stats(server, topic, CHANNEL)
        assert stats["message_count"] == 3000
        assert stats["requeue_count"] == 0 and stats["timeout_count"] == 0


def test_trigger_available_now_with_a_wal_drains_the_backlog_once_and_stops(
    spark: Any, nsqd: NsqdServer, tmp_path: Path
) -> None:
    topic = "wal_backlog"

    def run(sink: Sizes) -> None:
        query = wal_query(
            spark,
            tmp_path,
            topic,
            sink,
            available_now=True,
            nsqdTcpAddresses=nsqd.tcp_address,
            maxMessagesPerBatch=1500,
            availableNowIdleTimeout=1.0,
        )
        assert query.awaitTermination(120), "the AvailableNow query did not end by itself"
        assert query.exception() is None

    first = [f"a-{i}".encode() for i in range(5000)]
    publish(nsqd, first, topic)
    sink = Sizes(topic)
    run(sink)
    assert sorted(sink.bodies) == sorted(first)  # every message, once
    assert len(sink.sizes) >= 4 and max(sink.sizes) <= 1500  # in batches within the limit
    assert drained(nsqd, topic, CHANNEL)

    # What arrives after the run ended waits at nsqd for the next run, on the same checkpoint.
    # awaitTermination returns as the query ends; its source's connection leaves nsqd just
    # after (stop() runs in the source's process), and must leave.
    wait_until(
        lambda: not channel_stats(nsqd, topic, CHANNEL).get("clients"),
        timeout=30,
        message="the ended run's connection left nsqd",
    )
    second = [f"b-{i}".encode() for i in range(700)]
    publish(nsqd, second, topic)
    # nsqd copies a topic's messages to its channels in the background: wait for all 700
    wait_until(
        lambda: channel_stats(nsqd, topic, CHANNEL)["depth"] == len(second),
        timeout=10,
        message="the 700 messages wait in the channel",
    )
    again = Sizes(topic)
    run(again)
    assert sorted(again.bodies) == sorted(second)
    assert drained(nsqd, topic, CHANNEL)
