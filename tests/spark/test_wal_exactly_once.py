"""nsq -> Parquet with the WAL: crashes mid-stream, every message in the output exactly once.

Each scenario runs ``wal_pipeline_driver.py`` (a Spark driver in a session of
its own) against the ``nsqd`` fixture and checks Spark's committed Parquet
output: every published body once, the channel drained. ``readOn=driver``
(the default) across a SIGKILL of the driver; ``readOn=executors`` across a
SIGKILL of the driver, of an executor's Python worker mid-read (its share taken,
unanswered) and of one between its segment write and its FINs (the test hook
``GNSQLITE_SPARK_FAULT`` of :mod:`gnsqlite.spark.executor_read` picks the moment).
``tests/spark/run_crash_scenarios.py`` runs each scenario 20 times.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from crash_support import RETRYING, TOPIC, driver_killed_mid_stream, executors, one_run
from spark_support import channel_stats

from gnsqlite.testing import NsqdServer

pytestmark = pytest.mark.slow


def test_a_sigkilled_driver_restarted_on_its_checkpoint_writes_every_message_once(
    spark: Any, nsqd: NsqdServer, tmp_path: Path
) -> None:
    driver_killed_mid_stream(spark, nsqd, tmp_path, [])


def test_read_on_executors_a_sigkilled_driver_restarted_writes_every_message_once(
    spark: Any, nsqd: NsqdServer, tmp_path: Path
) -> None:
    driver_killed_mid_stream(spark, nsqd, tmp_path, executors(nsqd), total=6000)


@pytest.mark.parametrize(
    "stage", ["taken", "written"], ids=["mid-read", "between-segment-write-and-fins"]
)
def test_read_on_executors_a_python_worker_sigkilled_loses_and_repeats_nothing(
    spark: Any, nsqd: NsqdServer, tmp_path: Path, stage: str
) -> None:
    """``taken``: its share taken, unanswered; ``written``: its segment written, before FINs."""
    fault = tmp_path / "fault-fired"
    one_run(
        spark,
        nsqd,
        tmp_path,
        executors(nsqd, RETRYING),
        lambda driver, log, feeder: None,
        env={"GNSQLITE_SPARK_FAULT": f"{stage}:{fault}"},
    )
    assert fault.exists()  # a worker reached the stage and was SIGKILLed there
    # It held its messages unanswered: nsqd timed them out and delivered them again
    # (after "written", they were found in the segment and finished, not read twice).
    assert channel_stats(nsqd, TOPIC, "parquet")["timeout_count"] > 0
