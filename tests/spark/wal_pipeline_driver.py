"""A Spark driver for the crash test: nsq (with a WAL) -> Parquet through Spark's file sink.

Run as a script; it runs until killed::

    python wal_pipeline_driver.py NSQD_TCP TOPIC WAL CHECKPOINT OUT
"""

from __future__ import annotations

import os
import sys
import time


def main() -> None:
    nsqd, topic, wal, checkpoint, out = sys.argv[1:6]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from gnsqlite.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("gnsqlite-wal-crash")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.pollingDelay", "20ms")
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    query = (spark.readStream.format("nsq").option("nsqdTcpAddresses", nsqd)
             .option("topic", topic).option("channel", "parquet")
             .option("walLocation", wal).option("maxMessagesPerBatch", 1500)
             .option("msgTimeout", 4.0)
             .load().select("id", "body", "attempts")
             .writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint).start())
    print("driver: query started", flush=True)
    while query.isActive:
        time.sleep(0.2)
    print(f"driver: query ended: {query.exception()}", flush=True)
    sys.exit(1)


if __name__ == "__main__":
    main()
