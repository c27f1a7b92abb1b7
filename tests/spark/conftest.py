"""One local[2] SparkSession shared by the Spark connector tests.

The Spark tests need PySpark (``gnsqlite[spark]``) and Java 17; without them
they are skipped with the reason (the pure tests still run).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A local[2] SparkSession with the ``nsq`` format registered, shared by every module.

    Starting and warming up Spark's JVM costs 15-25 s on two cores, so the
    modules share one session (stopped at the end of the test session).
    The JVM runs its C1 compiler only, which warms up faster in short runs.

    Skips when PySpark (the ``spark`` extra) or Java is missing.
    """
    pytest.importorskip("pyspark", reason="the spark extra (PySpark) is not installed")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java 17: none on PATH and no JAVA_HOME")
    from pyspark.sql import SparkSession

    from gnsqlite.spark import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("gnsqlite-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.memory", "1g")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.streaming.pollingDelay", "20ms")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()
