"""readOn=executors without a SparkSession: the planner and the executors' read, called directly."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from spark_support import channel_stats, drained, publish

from gnsqlite.errors import ConfigError
from gnsqlite.testing import NsqdServer, wait_until

pytest.importorskip("pyspark", reason="the spark extra (PySpark) is not installed")

from gnsqlite.spark.executor_read import NSQSharePartition, ShareTaker, read_share
from gnsqlite.spark.executor_source import NSQExecutorStreamReader
from gnsqlite.spark.options import parse_source_options
from gnsqlite.spark.planning import Backlog, BatchPlan, plan_shares
from gnsqlite.spark.wal import WalStore

TOPIC = "spread"
CHANNEL = "spark"


def make_reader(server: NsqdServer, wal: Path, **extra: Any) -> NSQExecutorStreamReader:
    options = {
        "nsqdTcpAddresses": server.tcp_address,
        "nsqdHttpAddresses": server.http_address,
        "topic": TOPIC,
        "channel": CHANNEL,
        "walLocation": str(wal),
        "readOn": "executors",
        "numPartitions": "3",
        "readIdleTimeout": "0.3",
    }
    options.update({k: str(v) for k, v in extra.items()})
    return NSQExecutorStreamReader(parse_source_options(options))


def bodies(
    reader: NSQExecutorStreamReader, start: dict[str, Any], end: dict[str, Any]
) -> list[bytes]:
    out: list[bytes] = []
    for part in reader.partitions(start, end):
        for batch in reader.read(part):
            assert batch.schema.names == ["id", "body", "timestamp", "attempts", "topic", "nsqd"]
            out.extend(batch.column("body").to_pylist())
    return out


def test_shares_follow_each_nsqds_backlog_and_the_batch_limit() -> None:
    backlogs = [Backlog("a:4150", 600, 0), Backlog("b:4150", 300, 100), Backlog("c:4150", 0, 50)]
    shares = plan_shares(backlogs, 500, 4)
    assert sum(n for _, n in shares) == 500
    assert {a for a, _ in shares} == {"a:4150", "b:4150"}  # c has only in-flight messages
    assert sum(n for a, n in shares if a == "a:4150") == 300  # 600 of 1,000 available
    assert len(shares) == 4
    assert plan_shares(backlogs, None, 1) == [("a:4150", 600), ("b:4150", 400)]
    assert plan_shares([Backlog("a:4150", 0, 9)], 100, 2) == []
    plan = BatchPlan(3, tuple(shares))
    assert BatchPlan.from_offset(plan.offset()) == plan
    with pytest.raises(ValueError, match="checkpointLocation"):
        BatchPlan.from_offset({"segment": 0, "row": 0})  # a checkpoint of readOn=driver


def test_read_on_executors_needs_a_wal_and_the_http_addresses() -> None:
    base = {
        "nsqdTcpAddresses": "127.0.0.1:4150",
        "topic": "t",
        "channel": "c",
        "readOn": "executors",
    }
    with pytest.raises(ConfigError, match="walLocation"):
        parse_source_options(base)
    with pytest.raises(ConfigError, match="nsqdHttpAddresses"):
        parse_source_options({**base, "walLocation": "/tmp/w"})
    with pytest.raises(ConfigError, match="readOn='everywhere'"):
        parse_source_options({**base, "walLocation": "/tmp/w", "readOn": "everywhere"})
    with pytest.raises(ConfigError, match="deadLetterTopic is for readOn=driver"):
        parse_source_options(
            {
                **base,
                "walLocation": "/tmp/w",
                "nsqdHttpAddresses": "h:4151",
                "maxAttempts": "3",
                "deadLetterTopic": "t.dead",
            }
        )


def test_a_batch_is_planned_from_nsqd_read_into_segments_and_a_reread_takes_nothing(
    nsqd: NsqdServer, tmp_path: Path
) -> None:
    wal = tmp_path / "wal"
    expected = [f"m-{i}".encode() for i in range(3000)]
    reader = make_reader(nsqd, wal, maxMessagesPerBatch=2000)
    try:
        start = reader.initialOffset()
        # The planner made the topic and the channel, so what is published now is kept for it.
        assert channel_stats(nsqd, TOPIC, CHANNEL)["depth"] == 0
        assert reader.latestOffset(start) == start  # nothing queued: no batch
        publish(nsqd, expected, TOPIC)
        end = reader.latestOffset(start)
        assert BatchPlan.from_offset(end).rows == 2000 and len(end["shares"]) == 3
        first = bodies(reader, start, end)
        assert len(first) == 2000 and len(set(first)) == 2000
        # FINished once durable: nothing in flight, the rest still queued.
        wait_until(
            lambda: channel_stats(nsqd, TOPIC, CHANNEL)["in_flight_count"] == 0,
            timeout=10,
            message="the batch finished at nsqd",
        )
        assert channel_stats(nsqd, TOPIC, CHANNEL)["depth"] == 1000
        assert len(list(wal.glob("batch-*.arrow"))) == 3
        # Read again (a replay, a retried task): the same rows, nothing taken from nsqd.
        assert bodies(reader, start, end) == first
        assert channel_stats(nsqd, TOPIC, CHANNEL)["depth"] == 1000
        nxt = reader.latestOffset(end)
        rest = bodies(reader, end, nxt)
        assert sorted(first + rest) == sorted(expected)
        wait_until(lambda: drained(nsqd, TOPIC, CHANNEL), timeout=10)
        assert reader.latestOffset(nxt) == nxt
        reader.commit(nxt)  # too recent to delete: kept for the redelivery check
        assert len(list(wal.glob("batch-*.arrow"))) == 6
    finally:
        reader.stop()


class RacingStore(WalStore):
    """A store whose ``exists`` misses the other attempt's segment: both attempts consume."""

    def exists(self, name: str) -> bool:
        return False


def test_of_two_attempts_one_segment_wins_and_the_other_gives_its_messages_back(
    nsqd: NsqdServer, tmp_path: Path
) -> None:
    wal = tmp_path / "wal"
    reader = make_reader(nsqd, wal)
    try:
        start = reader.initialOffset()
        publish(nsqd, [f"w-{i}".encode() for i in range(300)], TOPIC)
        end = reader.latestOffset(start, None)
        part = reader.partitions(start, end)[0]
        assert isinstance(part, NSQSharePartition)
        winner = [r["body"] for b in read_share(part) for r in b.to_pylist()]
        loser = [r["body"] for b in read_share(part, RacingStore(str(wal))) for r in b.to_pylist()]
        assert loser == winner  # the loser yields the winning segment's rows
        # The loser took the next messages and gave them back: queued again, none lost.
        wait_until(
            lambda: channel_stats(nsqd, TOPIC, CHANNEL)["in_flight_count"] == 0,
            timeout=10,
            message="the loser's messages given back",
        )
        stats = channel_stats(nsqd, TOPIC, CHANNEL)
        assert stats["depth"] == 300 - len(winner) and stats["requeue_count"] > 0
    finally:
        reader.stop()


def test_a_redelivery_of_a_message_in_a_segment_is_finished_not_read_again(
    nsqd: NsqdServer, tmp_path: Path
) -> None:
    """A task that wrote its segment and died before its FINs: nsqd redelivers, no duplicate."""
    from gnsqlite.spark._hub import HubThread

    wal = tmp_path / "wal"
    reader = make_reader(nsqd, wal, numPartitions=1)
    expected = [f"r-{i}".encode() for i in range(200)]
    try:
        start = reader.initialOffset()
        publish(nsqd, expected, TOPIC)
        end = reader.latestOffset(start)
        part = reader.partitions(start, end)[0]
        assert isinstance(part, NSQSharePartition)
        store = WalStore(str(wal))
        hub = HubThread("dies-before-fin")
        hub.start()
        try:  # the read of _take, cut between the segment write and the FINs
            taker = ShareTaker(part.options, part.nsqd, part.share, store, part.segment)
            rows = hub.call(taker.take)
            assert store.write_first(part.segment, rows)
            hub.call(taker.close)  # unanswered: nsqd requeues them, attempts 2
        finally:
            hub.stop()
        nxt = reader.latestOffset(end)
        assert BatchPlan.from_offset(nxt).rows == len(expected)  # redelivered, planned again
        assert bodies(reader, end, nxt) == []  # every one found in batch 1's segment
        wait_until(
            lambda: drained(nsqd, TOPIC, CHANNEL), timeout=10, message="the redeliveries finished"
        )
        assert sorted(bodies(reader, start, end)) == sorted(expected)
    finally:
        reader.stop()


def test_with_lookupd_the_shares_spread_over_every_nsqd_of_the_topic(
    nsq_cluster: Any, tmp_path: Path
) -> None:
    first, second, third = nsq_cluster.nsqds
    publish(first, [f"a-{i}".encode() for i in range(900)], TOPIC)
    publish(second, [f"b-{i}".encode() for i in range(300)], TOPIC)
    lookupd = nsq_cluster.lookupd
    wait_until(
        lambda: len(lookupd.http.lookup(TOPIC)["producers"]) == 2,
        timeout=10,
        message="two nsqd of the topic registered with lookupd",
    )
    options = {
        "lookupdHttpAddresses": lookupd.http_address,
        "topic": TOPIC,
        "channel": CHANNEL,
        "walLocation": str(tmp_path / "wal"),
        "readOn": "executors",
        "numPartitions": "4",
        "readIdleTimeout": "0.3",
    }
    reader = NSQExecutorStreamReader(parse_source_options(options))
    try:
        start = reader.initialOffset()  # creates the channel on both nsqd
        end = reader.latestOffset(start, None)
        shares = BatchPlan.from_offset(end).shares
        assert {a for a, _ in shares} == {first.tcp_address, second.tcp_address}
        assert sum(n for a, n in shares if a == first.tcp_address) == 900  # all of each backlog
        assert sum(n for a, n in shares if a == second.tcp_address) == 300
        got = bodies(reader, start, end)
        assert sorted(got) == sorted(
            [f"a-{i}".encode() for i in range(900)] + [f"b-{i}".encode() for i in range(300)]
        )
        assert drained(first, TOPIC, CHANNEL) and drained(second, TOPIC, CHANNEL)
        assert not channel_stats(third, TOPIC, CHANNEL)  # never had the topic
    finally:
        reader.stop()


def test_trigger_available_now_reads_what_the_channel_held_at_the_first_batch_then_ends(
    nsqd: NsqdServer, tmp_path: Path
) -> None:
    reader = make_reader(nsqd, tmp_path / "wal", maxMessagesPerBatch=300)
    try:
        start = reader.initialOffset()
        publish(nsqd, [f"n-{i}".encode() for i in range(500)], TOPIC)
        reader.prepareForTriggerAvailableNow()
        got: list[bytes] = []
        end = start
        for _ in range(2):  # 300, then 200: maxMessagesPerBatch keeps its meaning
            nxt = reader.latestOffset(end)
            got += bodies(reader, end, nxt)
            end = nxt
        assert sorted(got) == sorted(f"n-{i}".encode() for i in range(500))
        publish(nsqd, [b"later"] * 50, TOPIC)
        assert reader.latestOffset(end) == end  # the end: later messages wait for the next run
        assert channel_stats(nsqd, TOPIC, CHANNEL)["depth"] == 50
    finally:
        reader.stop()


def test_a_share_above_nsqds_max_rdy_count_is_taken_over_several_connections(
    tmp_path: Path,
) -> None:
    """nsqd's --max-rdy-count caps each connection's RDY: a task splits its share to fit it."""
    with NsqdServer(max_rdy_count=100) as server:
        expected = [f"s-{i}".encode() for i in range(450)]
        reader = make_reader(server, tmp_path / "wal", numPartitions=1)
        try:
            start = reader.initialOffset()
            publish(server, expected, TOPIC)
            end = reader.latestOffset(start)
            assert BatchPlan.from_offset(end).shares == ((server.tcp_address, 450),)
            got = bodies(reader, start, end)
            assert sorted(got) == sorted(expected)  # one share, five connections of RDY <= 100
            wait_until(
                lambda: drained(server, TOPIC, CHANNEL),
                timeout=10,
                message="the share finished at nsqd",
            )
        finally:
            reader.stop()


def test_a_read_ends_only_once_nsqd_has_handled_its_fins(nsqd: NsqdServer, tmp_path: Path) -> None:
    """The rows go to Spark while nsqd works through the FINs; the read still ends after them.

    A Spark task ends when its read's iterator does: by then every message of
    the share must be finished at nsqd, not merely sent a FIN.
    """
    reader = make_reader(nsqd, tmp_path / "wal", numPartitions=2)
    try:
        start = reader.initialOffset()
        publish(nsqd, [f"f-{i}".encode() for i in range(6000)], TOPIC)
        end = reader.latestOffset(start)
        left = 6000
        for part in reader.partitions(start, end):
            assert isinstance(part, NSQSharePartition)
            assert sum(b.num_rows for b in reader.read(part)) == part.share
            left -= part.share
            stats = channel_stats(nsqd, TOPIC, CHANNEL)  # at once: no waiting here
            assert (stats["in_flight_count"], stats["depth"]) == (0, left)
        assert left == 0
    finally:
        reader.stop()


def test_a_read_frees_its_messages_when_it_ends_not_at_the_next_garbage_collection(
    nsqd: NsqdServer, tmp_path: Path
) -> None:
    """A task's messages are freed as its read ends (refcounts), none left to the collector.

    Spark's Python worker runs a full ``gc.collect()`` after every task and
    keeps running tasks: messages left in a reference cycle would stay in
    memory until then and make that collection walk them.
    """
    reader = make_reader(nsqd, tmp_path / "wal", numPartitions=1)
    try:
        start = reader.initialOffset()
        publish(nsqd, [f"g-{i}".encode() for i in range(3000)], TOPIC)
        end = reader.latestOffset(start)
        gc.collect()
        gc.disable()  # what the read leaves in cycles stays, and is counted below
        try:
            assert len(bodies(reader, start, end)) == 3000
            # A taken message is its frame's data: a 26-byte header, then its body.
            # Modules are left out: a module's names are in its dict, walked anyway,
            # and CPython before 3.12.6 corrupts _asyncio's free list when its module
            # is asked for referents (gh-122695): the next full collection never ends.
            alive = sum(
                1
                for o in gc.get_objects()
                if type(o) is not ModuleType
                for r in gc.get_referents(o)
                if type(r) is bytes and r[26:28] == b"g-"
            )
        finally:
            gc.enable()
        assert alive == 0
        wait_until(lambda: drained(nsqd, TOPIC, CHANNEL), timeout=10, message="the share finished")
    finally:
        reader.stop()


FREEZE_SCRIPT = """
import gc, json, sys
from pyspark.taskcontext import TaskContext
from gnsqlite.spark.executor_read import NSQSharePartition, read_share
from gnsqlite.spark.options import parse_source_options

options = parse_source_options(json.loads(sys.argv[1]))
at_start = gc.get_freeze_count()  # 375 on CPython 3.12 before any code runs, 0 on others
def read(batch):
    part = NSQSharePartition(0, batch, options.nsqd_tcp_addresses[0], 100, options)
    return sum(b.num_rows for b in read_share(part))
rows = [read(1)]
outside = gc.get_freeze_count()
TaskContext._getOrCreate()  # what Spark's worker sets for each task
rows.append(read(2))
inside = gc.get_freeze_count()
rows.append(read(3))
print(json.dumps([rows, at_start, outside, inside, gc.get_freeze_count()]))
"""


def test_in_a_spark_task_the_first_read_freezes_the_workers_objects_once(
    nsqd: NsqdServer, tmp_path: Path
) -> None:
    """Spark's worker collects garbage fully after every task: its long-lived objects are frozen.

    Only in a Spark task (a process that calls read_share outside one, such
    as this test's, is left alone), and once per process.
    """
    reader = make_reader(nsqd, tmp_path / "wal", numPartitions=1)
    try:
        reader.initialOffset()  # creates the channel
        publish(nsqd, [f"f-{i}".encode() for i in range(300)], TOPIC)
    finally:
        reader.stop()
    options = {
        "nsqdTcpAddresses": nsqd.tcp_address,
        "nsqdHttpAddresses": nsqd.http_address,
        "topic": TOPIC,
        "channel": CHANNEL,
        "walLocation": str(tmp_path / "wal"),
        "readOn": "executors",
        "readIdleTimeout": "0.3",
    }
    done = subprocess.run(
        [sys.executable, "-c", FREEZE_SCRIPT, json.dumps(options)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    rows, at_start, outside, inside, after = json.loads(done.stdout.splitlines()[-1])
    assert rows == [100, 100, 100]
    assert outside == at_start  # not in a task: the collector left alone
    assert inside - at_start > 10_000  # PySpark's, pyarrow's, gevent's and gnsqlite's objects
    assert after == inside  # once per process
