"""Spark connector throughput: the batch sink and the streaming source (not a test).

Prints rows per second for ``df.write.format("nsq")`` and for
``spark.readStream.format("nsq")`` at two ``maxMessagesPerBatch`` sizes,
with the Spark version and the core count. Runs an embedded nsqd and
``local[2]`` (``--master`` to change); a short warm-up query runs first so
the JVM's start-up is not counted. Needs ``gnsqlite[spark]`` and Java 17::

    python benchmarks/bench_spark.py --rows 200000 --messages 50000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from typing import Any

from gnsqlite.http import NsqdHTTPClient
from gnsqlite.testing import NsqdServer, wait_until

BODY = b"x" * 100


def publish(server: NsqdServer, topic: str, count: int) -> None:
    client = NsqdHTTPClient(server.http_address, timeout=30.0)
    for start in range(0, count, 2000):
        client.mpub(topic, [BODY] * min(2000, count - start))


def bench_sink(spark: Any, server: NsqdServer, rows: int) -> float:
    df = spark.range(rows).selectExpr("concat('row-', id, '-', repeat('x', 90)) as body")
    df = df.cache()
    df.count()
    started = time.perf_counter()
    (df.write.format("nsq").option("nsqdTcpAddresses", server.tcp_address)
     .option("topic", "bench_sink").mode("append").save())
    elapsed = time.perf_counter() - started
    df.unpersist()
    return rows / elapsed


def bench_source(spark: Any, server: NsqdServer, topic: str, messages: int,
                 per_batch: int) -> tuple[float, int]:
    publish(server, topic, messages)
    seen = [0]
    batches = [0]
    lock = threading.Lock()

    def count(df: Any, batch_id: int) -> None:
        n = df.count()
        with lock:
            seen[0] += n
            batches[0] += 1 if n else 0

    checkpoint = tempfile.mkdtemp(prefix="bench-spark-")
    started = time.perf_counter()
    query = (spark.readStream.format("nsq").option("nsqdTcpAddresses", server.tcp_address)
             .option("topic", topic).option("channel", "bench")
             .option("maxMessagesPerBatch", per_batch).load()
             .writeStream.foreachBatch(count).option("checkpointLocation", checkpoint).start())
    try:
        wait_until(lambda: seen[0] >= messages, timeout=600, interval=0.05)
        elapsed = time.perf_counter() - started
    finally:
        query.stop()
    return messages / elapsed, batches[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows for the batch sink")
    parser.add_argument("--messages", type=int, default=50_000, help="messages per source run")
    parser.add_argument("--batch-sizes", default="2000,10000", help="maxMessagesPerBatch values")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import pyspark
    from pyspark.sql import SparkSession

    from gnsqlite.spark import register

    sizes = [int(s) for s in args.batch_sizes.split(",")]
    spark = (SparkSession.builder.master(args.master).appName("bench_spark")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    print(f"PySpark {pyspark.__version__}, master {args.master},"
          f" {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    with NsqdServer(max_rdy_count=max(2500, 2 * max(sizes))) as server:
        bench_sink(spark, server, 10_000)  # warm-up
        bench_source(spark, server, "bench_warmup", 5_000, 1000)
        rate = bench_sink(spark, server, args.rows)
        print(f"batch sink:      {args.rows:>8} rows      {rate:>10,.0f} rows/s")
        for size in sizes:
            rate, batches = bench_source(spark, server, f"bench_source_{size}", args.messages,
                                         size)
            print(f"streaming source: {args.messages:>7} messages, maxMessagesPerBatch={size}:"
                  f" {rate:>10,.0f} rows/s ({batches} batches)")
    spark.stop()


if __name__ == "__main__":
    main()
