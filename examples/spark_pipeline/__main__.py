"""The whole Spark pipeline, one command, on the embedded broker and local[2]::

    python examples/spark_pipeline --pages 5000 --out /tmp/spark_pipeline

1. starts an embedded nsqd (``gnsqlite.testing.NsqdServer``; a real one with
   ``--nsqd-tcp-address``);
2. starts the summary printer (``summaries.py``) and the page generator
   (``generator.py``) as subprocesses;
3. runs the Structured Streaming job (``job.py``) in this process, on
   ``local[2]`` (``--master`` for a cluster), with the source's write-ahead
   log in ``<out>/wal`` (``--wal``), until the summaries account for every page;
4. stops the query and the broker, and prints where the Parquet files are.

A bad option, or no nsqd answering at ``--nsqd-tcp-address``, stops it
before Spark starts, with one line on stderr and exit status 1.

Needs ``pip install 'gnsqlite[spark]'`` and Java 17. Nothing is
monkey-patched: an application that patches must do it before creating its
SparkSession.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from gnsqlite.connection import Connection
from gnsqlite.errors import ConfigError, NSQError

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def check_nsqd(address: str) -> None:
    """Raise ``ConfigError`` or ``NSQConnectionError`` unless an nsqd answers at ``address``."""
    try:
        probe = Connection(address)
    except ValueError as exc:
        raise ConfigError(f"--nsqd-tcp-address: {exc}") from None
    probe.connect()
    probe.close()


def main() -> int:
    parser = argparse.ArgumentParser(description="NSQ -> Spark -> Parquet and NSQ")
    parser.add_argument("--pages", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=2000.0, help="pages per second")
    parser.add_argument("--per-batch", type=int, default=1000, help="maxMessagesPerBatch")
    parser.add_argument("--out", default="/tmp/spark_pipeline")
    parser.add_argument("--nsqd-tcp-address", help="use this nsqd instead of an embedded one")
    parser.add_argument("--master", default="local[2]", help="Spark master URL")
    parser.add_argument(
        "--wal",
        help="the source's walLocation (default: <out>/wal);"
        " on a cluster, storage every executor reads",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds")
    args = parser.parse_args()
    if args.pages < 1 or not args.rate > 0 or args.per_batch < 1:
        parser.error("--pages and --per-batch must be 1 or more, --rate more than 0")
    if args.nsqd_tcp_address is not None:
        check_nsqd(args.nsqd_tcp_address)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import job
    from pyspark.sql import SparkSession

    from gnsqlite.spark import register
    from gnsqlite.testing import NsqdServer

    server = None
    address = args.nsqd_tcp_address
    if address is None:
        server = NsqdServer(bin_dir="")
        server.start()
        address = server.tcp_address
        print(f"pipeline: embedded nsqd on {address}", flush=True)
    spark = (
        SparkSession.builder.master(args.master)
        .appName("gnsqlite-spark-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    run = [sys.executable, "-u"]
    printer = subprocess.Popen(
        [
            *run,
            str(HERE / "summaries.py"),
            "--nsqd-tcp-address",
            address,
            "--pages",
            str(args.pages),
        ]
    )
    generator = subprocess.Popen(
        [
            *run,
            str(HERE / "generator.py"),
            "--nsqd-tcp-address",
            address,
            "--pages",
            str(args.pages),
            "--rate",
            str(args.rate),
        ]
    )
    query = job.start(
        spark, address, args.out, args.per_batch, args.wal or os.path.join(args.out, "wal")
    )
    try:
        status = printer.wait(args.timeout)
    except subprocess.TimeoutExpired:
        print("pipeline: timed out", flush=True)
        status = 1
    finally:
        # The printer can see the last summary before Spark has committed the
        # batch that published it: let the running trigger end before stopping,
        # rather than interrupting its write.
        deadline = time.monotonic() + 30
        while query.status.get("isTriggerActive") and time.monotonic() < deadline:
            time.sleep(0.1)
        query.stop()
        for proc in (generator, printer):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(10)
        spark.stop()
        if server is not None:
            server.close()
    print(f"pipeline: per-domain statistics in {args.out}/domain_stats (Parquet)", flush=True)
    return status


if __name__ == "__main__":
    try:
        sys.exit(main())
    except NSQError as exc:  # a bad option, or no nsqd: one line, not a traceback
        sys.exit(f"spark_pipeline: {exc}")
