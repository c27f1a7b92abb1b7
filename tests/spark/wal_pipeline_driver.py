"""A Spark driver for the crash tests: nsq (with a WAL) -> Parquet through Spark's file sink.

Run as a script; it runs until killed::

    python wal_pipeline_driver.py NSQD_TCP TOPIC WAL CHECKPOINT OUT [MASTER] [option=value ...]

``MASTER`` defaults to ``local[2]``; each ``option=value`` is one more
option of the nsq source (``readOn=executors``, ``nsqdHttpAddresses=...``).
"""

from __future__ import annotations

import os
import sys
import time


def main() -> None:
    nsqd, topic, wal, checkpoint, out = sys.argv[1:6]
    rest = sys.argv[6:]
    master = rest.pop(0) if rest and "=" not in rest[0] else "local[2]"
    extra = dict(arg.split("=", 1) for arg in rest)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from gnsqlite.spark import register

    spark = (
        SparkSession.builder.master(master)
        .appName("gnsqlite-wal-crash")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.pollingDelay", "20ms")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    reader = (
        spark.readStream.format("nsq")
        .option("nsqdTcpAddresses", nsqd)
        .option("topic", topic)
        .option("channel", "parquet")
        .option("walLocation", wal)
        .option("maxMessagesPerBatch", 1500)
        .option("msgTimeout", 4.0)
    )
    for key, value in extra.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .select("id", "body", "attempts")
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    print("driver: query started", flush=True)
    while query.isActive:
        time.sleep(0.2)
    print(f"driver: query ended: {query.exception()}", flush=True)
    sys.exit(1)


if __name__ == "__main__":
    main()
