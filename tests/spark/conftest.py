"""One local[2] SparkSession shared by the Spark connector tests.

The Spark tests need PySpark (``gnsqlite[spark]``) and Java 17; without them
they are skipped with the reason (the pure tests still run).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

_HERE = Path(__file__).resolve().parent
_turn: list[IO[str]] = []  # the lock file while this run holds the Spark turn


def pytest_runtest_setup(item: pytest.Item) -> None:
    """With ``GNSQLITE_CI_SPARK_LOCK`` set, this directory's tests wait for their turn.

    ``.ci/run`` runs several suites side by side; their Spark tests keep both
    cores busy, so the suites take turns at them: the first of them takes an
    exclusive ``flock`` on that file (blocking until the suite before is done),
    the last gives it back (:func:`pytest_runtest_teardown`). Unset: nothing.
    """
    path = os.environ.get("GNSQLITE_CI_SPARK_LOCK")
    if path and not _turn:
        lock = open(path, "a")  # noqa: SIM115 (held across tests, closed in teardown)
        fcntl.flock(lock, fcntl.LOCK_EX)
        _turn.append(lock)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Give the Spark turn back after this directory's last test of the run."""
    if _turn and (nextitem is None or _HERE not in Path(nextitem.path).resolve().parents):
        lock = _turn.pop()
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


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
