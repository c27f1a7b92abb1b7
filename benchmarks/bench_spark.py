"""Spark connector throughput against the bare client on the same nsqd (not a test).

Prints, in one run on one nsqd with its default flags:

* the bare ``gnsqlite.Consumer`` draining ``--messages`` messages
  (max_in_flight 2500), and the ``nsq`` streaming source with a WAL
  (``walLocation``; without one with ``--no-wal``) reading as many from
  the same nsqd, as a ratio of the bare consumer, ``--repeat`` pairs (the
  median ratio). Two figures: with the query's start-up (from
  ``query.start()``; the target's figure) and from the source's
  subscription (when nsqd lists its connection, where the bare consumer's
  clock effectively starts);
* one ``Producer``'s MPUB rate (1,000 messages per MPUB) for ``--rows``
  messages, and the batch sink (``df.write.format("nsq")``) writing as
  many rows, as a ratio of the Producer.

Messages are 100 bytes. Runs an embedded nsqd, or the real one when
``GNSQLITE_NSQD`` names the directory of its binaries, and ``local[2]``
(``--master`` to change); a short warm-up runs first so the JVM's own
start-up is not counted. Needs ``gnsqlite[spark]`` and Java 17::

    GNSQLITE_NSQD=/path/to/nsq/bin python benchmarks/bench_spark.py \\
        --rows 500000 --messages 200000 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from typing import Any, NamedTuple

import gevent
import gevent.event

from gnsqlite.consumer import Consumer
from gnsqlite.message import Message
from gnsqlite.producer import Producer
from gnsqlite.testing import NsqdServer, nsq_bin_dir, wait_until

BODY = b"x" * 100


def publish(server: NsqdServer, topic: str, count: int) -> float:
    """MPUB ``count`` 100-byte messages with one Producer; returns messages per second."""
    with Producer(server.tcp_address) as producer:
        chunk = [BODY] * 1000
        started = time.perf_counter()
        for start in range(0, count, 1000):
            producer.multi_publish(topic, chunk[: min(1000, count - start)])
        return count / (time.perf_counter() - started)


def bench_consumer(server: NsqdServer, topic: str, messages: int) -> float:
    """A bare Consumer draining ``messages``; messages per second from its start."""
    seen = [0]
    done = gevent.event.Event()

    def handle(message: Message) -> None:
        seen[0] += 1
        if seen[0] >= messages:
            done.set()

    consumer = Consumer(topic, "bench", handle, nsqd_tcp_addresses=[server.tcp_address],
                        max_in_flight=2500)
    started = time.perf_counter()
    consumer.start()
    try:
        if not done.wait(600):
            raise TimeoutError(f"the consumer got {seen[0]} of {messages} messages")
        return messages / (time.perf_counter() - started)
    finally:
        consumer.close(5.0)


def bench_sink(spark: Any, server: NsqdServer, rows: int) -> float:
    df = spark.range(rows).selectExpr("concat('row-', lpad(id, 10, '0'), repeat('x', 86)) as body")
    df = df.cache()
    df.count()
    started = time.perf_counter()
    (df.write.format("nsq").option("nsqdTcpAddresses", server.tcp_address)
     .option("topic", "bench_sink").mode("append").save())
    elapsed = time.perf_counter() - started
    df.unpersist()
    return rows / elapsed


class SourceRun(NamedTuple):
    """One run of the streaming source over a backlog."""

    with_startup: float  # rows/s from query.start() until the last row reached foreachBatch
    subscribed: float  # rows/s from the source's subscription at nsqd until the last row
    startup: float  # seconds from query.start() until the source subscribed
    batches: int


def bench_source(spark: Any, server: NsqdServer, topic: str, messages: int,
                 per_batch: int, extra: dict[str, str] | None = None,
                 wal: bool = True) -> SourceRun:
    """The source (with a WAL unless ``wal`` is false) reading ``messages`` published before.

    The clock starts at ``query.start()`` (start-up included: the query, the
    source's Python process, its connection) and, for the second figure, when
    nsqd first lists the source's connection on the channel, which is where a
    bare Consumer's clock effectively starts too.
    """
    seen = [0]
    batches = [0]
    lock = threading.Lock()

    def count(df: Any, batch_id: int) -> None:
        n = df.count()
        with lock:
            seen[0] += n
            batches[0] += 1 if n else 0

    scratch = tempfile.mkdtemp(prefix="bench-spark-")
    started = time.perf_counter()
    wal_option = {"walLocation": os.path.join(scratch, "wal")} if wal else {}
    query = (spark.readStream.format("nsq").option("nsqdTcpAddresses", server.tcp_address)
             .option("topic", topic).option("channel", "bench").options(**wal_option)
             .option("maxMessagesPerBatch", per_batch).options(**(extra or {})).load()
             .writeStream.foreachBatch(count)
             .option("checkpointLocation", os.path.join(scratch, "ck")).start())
    try:
        wait_until(lambda: server.channel_stats(topic, "bench").get("clients"), timeout=120,
                   interval=0.02, message="the source subscribed")
        subscribed = time.perf_counter()
        wait_until(lambda: seen[0] >= messages, timeout=600, interval=0.02)
        done = time.perf_counter()
    finally:
        query.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return SourceRun(messages / (done - started), messages / (done - subscribed),
                     subscribed - started, batches[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000, help="rows for the batch sink")
    parser.add_argument("--messages", type=int, default=200_000, help="messages per source run")
    parser.add_argument("--per-batch", type=int, default=100_000, help="maxMessagesPerBatch")
    parser.add_argument("--repeat", type=int, default=3,
                        help="consumer/source pairs; the ratios' median is reported")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE",
                        help="another option of the source (e.g. walBatchDelay=0)")
    parser.add_argument("--no-sink", action="store_true", help="measure the source only")
    parser.add_argument("--no-wal", action="store_true",
                        help="the source without walLocation (messages held at nsqd)")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import pyspark
    from pyspark.sql import SparkSession

    from gnsqlite.spark import register

    spark = (SparkSession.builder.master(args.master).appName("bench_spark")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    broker = nsq_bin_dir() or "embedded"
    print(f"PySpark {pyspark.__version__}, master {args.master}, {os.cpu_count()} cores,"
          f" Python {sys.version.split()[0]}, nsqd: {broker} (default flags), 100-byte messages")
    with NsqdServer() as server:
        extra = dict(o.split("=", 1) for o in args.source_option)
        bench_sink(spark, server, 20_000)  # warm-up
        publish(server, "bench_warmup", 20_000)
        wal = not args.no_wal
        bench_source(spark, server, "bench_warmup", 20_000, 10_000, extra, wal)

        if not args.no_sink:
            producer = publish(server, "bench_producer", args.rows)
            sink = bench_sink(spark, server, args.rows)
            print(f"one Producer, MPUB of 1000: {args.rows:>8} msgs  {producer:>10,.0f} msg/s")
            print(f"batch sink:                 {args.rows:>8} rows  {sink:>10,.0f} rows/s"
                  f"  = {sink / producer:.2f}x the Producer")

        bares: list[float] = []
        runs: list[SourceRun] = []
        for rep in range(args.repeat):  # alternate, so both see the same machine load
            publish(server, f"bench_consumer{rep}", args.messages)
            bares.append(bench_consumer(server, f"bench_consumer{rep}", args.messages))
            publish(server, f"bench_source{rep}", args.messages)
            runs.append(bench_source(spark, server, f"bench_source{rep}", args.messages,
                                     args.per_batch, extra, wal))
        mode = "WAL source" if wal else "source without walLocation"
        for bare, run in zip(bares, runs, strict=True):
            print(f"bare Consumer (RDY 2500):   {args.messages:>8} msgs  {bare:>10,.0f} msg/s;"
                  f" {mode} {run.with_startup:>8,.0f} rows/s with start-up"
                  f" ({run.startup:.2f} s), {run.subscribed:>8,.0f} from subscription,"
                  f" {run.batches} batches")
        pairs = list(zip(bares, runs, strict=True))
        with_startup = statistics.median(r.with_startup / b for b, r in pairs)
        subscribed = statistics.median(r.subscribed / b for b, r in pairs)
        print(f"{mode}, maxMessagesPerBatch={args.per_batch} {extra or ''},"
              f" median of {args.repeat}:"
              f" {with_startup:.2f}x the bare Consumer including the query's start-up (the"
              f" target's figure), {subscribed:.2f}x from the source's subscription")
    spark.stop()


if __name__ == "__main__":
    main()
