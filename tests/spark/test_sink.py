"""The nsq sink under real PySpark (local[2]) against a live nsqd."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from spark_support import consume, topic_count

from gnsqlite.testing import NsqdServer, wait_until

pytestmark = pytest.mark.slow

ROWS = 100_000


def test_batch_write_of_100k_rows_routes_each_row_by_its_topic(
    spark: Any, nsqd: NsqdServer
) -> None:
    df = spark.range(ROWS).selectExpr(
        "concat('row-', id) as body",
        "case id % 3 when 0 then 'sink_a' when 1 then 'sink_b' else null end as topic",
    )
    (
        df.write.format("nsq")
        .option("nsqdTcpAddresses", nsqd.tcp_address)
        .option("topic", "sink_default")
        .option("maxMessagesPerPublish", 5000)
        .mode("append")
        .save()
    )
    expected: dict[str, set[bytes]] = {"sink_a": set(), "sink_b": set(), "sink_default": set()}
    for i in range(ROWS):
        topic = ("sink_a", "sink_b", "sink_default")[i % 3]
        expected[topic].add(f"row-{i}".encode())
    for topic, bodies in expected.items():
        assert topic_count(nsqd, topic) == len(bodies)  # no duplicates on a clean run
        got = consume(nsqd, topic, len(bodies))
        assert set(got) == bodies


def test_bad_writes_fail_at_start_naming_the_problem(spark: Any, nsqd: NsqdServer) -> None:
    df = spark.range(3).selectExpr("cast(id as string) as body")
    writer = df.write.format("nsq").option("nsqdTcpAddresses", nsqd.tcp_address)
    named = r"(?i)unknown option .maxMessagesPerPublsh.*did you mean .maxMessagesPerPublish"
    with pytest.raises(Exception, match=named):
        writer.option("topic", "t").option("maxMessagesPerPublsh", 10).mode("append").save()
    with pytest.raises(Exception, match="give option 'topic' or a 'topic' column"):
        df.write.format("nsq").option("nsqdTcpAddresses", nsqd.tcp_address).mode("append").save()
    extra = spark.range(3).selectExpr("cast(id as string) as body", "id")
    with pytest.raises(Exception, match="'id' is not one"):
        extra.write.format("nsq").option("nsqdTcpAddresses", nsqd.tcp_address).option(
            "topic", "t"
        ).mode("append").save()
    assert topic_count(nsqd, "t") == 0


def test_rows_with_a_defer_column_are_published_deferred(spark: Any, nsqd: NsqdServer) -> None:
    df = spark.range(20).selectExpr("concat('later-', id) as body", "1.0 as defer")
    started = time.monotonic()
    (
        df.write.format("nsq")
        .option("nsqdTcpAddresses", nsqd.tcp_address)
        .option("topic", "deferred")
        .mode("append")
        .save()
    )
    got = consume(nsqd, "deferred", 20, timeout=30.0)
    assert sorted(got) == sorted(f"later-{i}".encode() for i in range(20))
    assert time.monotonic() - started >= 1.0


def test_streaming_write_of_a_file_stream(spark: Any, nsqd: NsqdServer, tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    expected = set()
    for f in range(3):
        lines = []
        for i in range(500):
            body = f"file{f}-line{i}"
            expected.add(body.encode())
            lines.append(json.dumps({"body": body, "n": i}))
        (inbox / f"part-{f}.json").write_text("\n".join(lines))
    stream = spark.readStream.schema("body string, n long").json(str(inbox)).select("body")
    query = (
        stream.writeStream.format("nsq")
        .option("nsqdTcpAddresses", nsqd.tcp_address)
        .option("topic", "from_files")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    wait_until(lambda: topic_count(nsqd, "from_files") >= len(expected), timeout=10)
    assert set(consume(nsqd, "from_files", len(expected))) == expected
