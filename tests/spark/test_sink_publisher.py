"""The sink's publishing path without a Spark job: chunking, counts, connection reuse."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from spark_support import consume, topic_count

from gnsqlite.testing import NsqdServer

pytest.importorskip("pyspark", reason="the spark extra (PySpark) is not installed")

from pyspark.sql import Row

from gnsqlite.spark.options import parse_sink_options
from gnsqlite.spark.sink import POOL, NSQCommitMessage, summarize, write_rows


def test_mpub_chunks_fit_nsqds_body_limit_and_counts_add_up(
    nsqd_factory: Callable[..., NsqdServer],
) -> None:
    server = nsqd_factory(max_body_size=4096, max_msg_size=1024)
    options = parse_sink_options(
        {"nsqdTcpAddresses": server.tcp_address, "topic": "chunks", "maxBodySize": "4096"}
    )
    rows = [
        Row(body=f"{i:05d}-".encode() + b"y" * 94, topic=None if i % 2 else "other")
        for i in range(2000)
    ]
    try:
        first = write_rows(options, rows[:1000])
        hub, producer = POOL.get(options)
        second = write_rows(options, iter(rows[1000:]))
        assert POOL.get(options) == (hub, producer)  # one connection per worker process
    finally:
        POOL.close()
    # 100-byte bodies, 4 bytes of size each, within 4096 bytes: 39 per MPUB at most.
    assert first.messages == 1000 and first.bytes == 100 * 1000
    assert first.topics == {"other": 500, "chunks": 500}
    assert first.publishes >= 2 * (500 // 39)
    total = summarize([first, second, None])
    assert total["messages"] == 2000 and total["missing"] == 1
    assert total["topics"] == {"other": 1000, "chunks": 1000}
    assert topic_count(server, "chunks") == 1000 and topic_count(server, "other") == 1000
    assert len(set(consume(server, "chunks", 1000))) == 1000


def test_a_row_above_max_message_size_fails_the_task(nsqd: NsqdServer) -> None:
    options = parse_sink_options(
        {"nsqdTcpAddresses": nsqd.tcp_address, "topic": "big", "maxMessageSize": "1000"}
    )
    try:
        with pytest.raises(Exception, match="maxMessageSize=1000"):
            write_rows(options, [Row(body=b"z" * 1001)])
    finally:
        POOL.close()
    assert isinstance(NSQCommitMessage(0), NSQCommitMessage)
