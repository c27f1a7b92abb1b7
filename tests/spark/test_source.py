"""The nsq streaming source under real PySpark (local[2]) against a live nsqd."""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_support import channel_stats, drained, publish

from gnsqlite.testing import NsqdServer, wait_until

pytestmark = pytest.mark.slow

TOPIC = "pages"
CHANNEL = "spark"
TIMEOUT = 8.0  # seconds: nsqd's msg_timeout in the killed-query test
GIVE_BACK = 3.0  # seconds: a stopped source's messages must leave flight well within TIMEOUT


@pytest.fixture
def broker(nsqd_factory: Callable[..., NsqdServer]) -> NsqdServer:
    """An nsqd whose RDY cap fits two batches of the tests' sizes."""
    return nsqd_factory(max_rdy_count=10000)


def reader(spark: Any, server: NsqdServer, per_batch: int, **options: Any) -> Any:
    r = (
        spark.readStream.format("nsq")
        .option("nsqdTcpAddresses", server.tcp_address)
        .option("topic", TOPIC)
        .option("channel", CHANNEL)
        .option("maxMessagesPerBatch", per_batch)
    )
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


def in_flight(server: NsqdServer) -> int:
    return int(channel_stats(server, TOPIC, CHANNEL).get("in_flight_count", 0))


class Collector:
    """A foreachBatch sink keeping every row's id and body (in the driver process)."""

    def __init__(self, fail_at_batch: int | None = None) -> None:
        self.ids: list[str] = []
        self.bodies: dict[str, bytes] = {}
        self.batches = 0
        self.fail_at_batch = fail_at_batch
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = df.select("id", "body", "attempts", "topic").collect()
        if self.fail_at_batch is not None and rows and self.batches >= self.fail_at_batch:
            raise RuntimeError("the sink failed on purpose")
        with self.lock:
            self.batches += 1 if rows else 0
            for row in rows:
                assert row["topic"] == TOPIC
                self.ids.append(row["id"])
                self.bodies[row["id"]] = bytes(row["body"])

    def count(self) -> int:
        with self.lock:
            return len(self.ids)


def test_streaming_read_of_20k_messages_reaches_the_sink_and_drains_the_channel(
    spark: Any, broker: NsqdServer, tmp_path: Path
) -> None:
    expected = {f"page-{i}".encode() for i in range(20_000)}
    publish(broker, sorted(expected), TOPIC)
    sink = Collector()
    query = (
        reader(spark, broker, 2000)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        wait_until(
            lambda: sink.count() >= len(expected) or query.exception(),
            timeout=180,
            interval=0.2,
            message="20,000 messages in the sink",
        )
        assert query.exception() is None
        # Spark commits the last batch to the source with the next (empty) one.
        wait_until(
            lambda: drained(broker, TOPIC, CHANNEL),
            timeout=30,
            interval=0.2,
            message="nothing in flight or queued at nsqd",
        )
        # The query's progress shows the backlog: messages received, and held at nsqd.
        reported = [
            json.loads(s["latestOffset"])
            for p in query.recentProgress
            for s in p["sources"]
            if s.get("latestOffset")
        ]
    finally:
        query.stop()
    assert reported and all(0 <= r["buffered"] <= r["held"] <= 2 * 2000 for r in reported)
    assert max(r["held"] for r in reported) > 0
    assert set(sink.bodies.values()) == expected
    assert len(sink.ids) == len(set(sink.ids)) == len(expected)  # a clean run: no duplicate
    assert max(len(s) for s in [sink.ids]) and sink.batches >= len(expected) // 2000
    stats = channel_stats(broker, TOPIC, CHANNEL)
    assert stats["requeue_count"] == 0 and stats["timeout_count"] == 0


def test_a_killed_query_restarted_from_its_checkpoint_loses_nothing(
    spark: Any, nsqd_factory: Callable[..., NsqdServer], tmp_path: Path
) -> None:
    # The source TOUCHes what it holds, so a live query keeps its messages
    # past nsqd's msg_timeout; a stopped one gives them back (REQ 0) at once,
    # well before nsqd would time them out.
    broker = nsqd_factory(max_rdy_count=10000, msg_timeout=TIMEOUT)
    per_batch = 500
    expected = {f"doc-{i}".encode() for i in range(4000)}
    publish(broker, sorted(expected), TOPIC)
    checkpoint = str(tmp_path / "ck")
    seen: collections.Counter[bytes] = collections.Counter()

    # Run 1: the sink raises on its third batch; the query dies.
    failing = Collector(fail_at_batch=2)
    q1 = (
        reader(spark, broker, per_batch)
        .writeStream.foreachBatch(failing)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    with pytest.raises(Exception, match="failed on purpose"):
        q1.awaitTermination(120)
    seen.update(failing.bodies[i] for i in failing.ids)
    assert 0 < len(failing.ids) < len(expected)
    # The dead query's source gives its unfinished messages back (REQ 0) when
    # Spark ends its process, whether Spark's SIGTERM or its closed socket
    # reaches the process first.
    wait_until(
        lambda: not in_flight(broker),
        timeout=GIVE_BACK,
        message=f"the dead query's messages given back within {GIVE_BACK} s",
    )

    # Run 2: restarted from the checkpoint, then stopped mid-stream.
    stopped = Collector()
    q2 = (
        reader(spark, broker, per_batch)
        .writeStream.foreachBatch(stopped)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    wait_until(lambda: stopped.batches >= 2 or q2.exception(), timeout=120, interval=0.1)
    assert in_flight(broker) > 0  # the source holds messages when it is stopped
    q2.stop()
    seen.update(stopped.bodies[i] for i in stopped.ids)
    wait_until(
        lambda: not in_flight(broker),
        timeout=GIVE_BACK,
        message=f"the stopped query's messages given back within {GIVE_BACK} s",
    )

    # Run 3: restarted again; runs until every message was seen and nsqd is drained.
    final = Collector()
    q3 = (
        reader(spark, broker, per_batch)
        .writeStream.foreachBatch(final)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    try:
        wait_until(
            lambda: expected <= set(seen) | set(final.bodies.values()) or q3.exception(),
            timeout=180,
            interval=0.2,
            message="every message reached the sink",
        )
        assert q3.exception() is None
        wait_until(lambda: drained(broker, TOPIC, CHANNEL), timeout=30, interval=0.2)
    finally:
        q3.stop()

    seen.update(final.bodies[i] for i in final.ids)
    assert set(seen) == expected
    # Given back, not timed out: nsqd timed out nothing the stopped queries held.
    assert channel_stats(broker, TOPIC, CHANNEL)["timeout_count"] == 0
    duplicates = sum(seen.values()) - len(expected)
    # Each interruption replays at most the two batches held unfinished at nsqd.
    assert duplicates <= 2 * 2 * per_batch, duplicates


def test_trigger_available_now_reads_the_backlog_then_ends(
    spark: Any, broker: NsqdServer, tmp_path: Path
) -> None:
    expected = {f"backlog-{i}".encode() for i in range(3000)}
    publish(broker, sorted(expected), TOPIC)
    sink = Collector()
    query = (
        reader(spark, broker, 1000, availableNowIdleTimeout=1.0)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert set(sink.bodies.values()) == expected and len(sink.ids) == len(expected)
    assert drained(broker, TOPIC, CHANNEL)


def test_a_bad_source_option_fails_the_query_naming_it(spark: Any, broker: NsqdServer) -> None:
    with pytest.raises(Exception, match=r"(?i)unknown option .maxMesagesPerBatch"):
        reader(spark, broker, 10, maxMesagesPerBatch=5)
    query = reader(spark, broker, 0).writeStream.format("memory").queryName("bad_option").start()
    with pytest.raises(Exception, match="maxMessagesPerBatch='0' is out of range"):
        query.awaitTermination(60)
