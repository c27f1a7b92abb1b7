"""nsq -> Parquet with the WAL: crashes mid-stream, every message in the output exactly once.

Each scenario runs ``wal_pipeline_driver.py`` (a Spark driver in a session of
its own) against the ``nsqd`` fixture and checks Spark's committed Parquet
output: every published body once, the channel drained. ``readOn=driver``
(the default) across a SIGKILL of the driver; ``readOn=executors`` across a
SIGKILL of the driver, of an executor's Python worker mid-read, and a worker
dying between its segment write and its FINs. ``tests/spark/run_crash_scenarios.py`` runs
each scenario 20 times.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from crash_support import RETRYING, TOPIC, Holder, driver_killed_mid_stream, executors, one_run
from spark_support import channel_stats, nsqd_clients

from gnsqlite.testing import NsqdServer, wait_until

pytestmark = pytest.mark.slow


def test_a_sigkilled_driver_restarted_on_its_checkpoint_writes_every_message_once(
    spark: Any, nsqd: NsqdServer, tmp_path: Path
) -> None:
    driver_killed_mid_stream(spark, nsqd, tmp_path, [])


def test_read_on_executors_a_sigkilled_driver_restarted_writes_every_message_once(
    spark: Any, nsqd: NsqdServer, tmp_path: Path
) -> None:
    driver_killed_mid_stream(spark, nsqd, tmp_path, executors(nsqd), total=6000)


def test_read_on_executors_a_python_worker_sigkilled_mid_read_loses_and_repeats_nothing(
    spark: Any, nsqd: NsqdServer, tmp_path: Path
) -> None:
    port = int(nsqd.tcp_address.rsplit(":", 1)[1])
    killed: list[int] = []

    def kill_a_reader(driver: subprocess.Popen[bytes], log: Path) -> None:
        holder = Holder(nsqd, 200)
        try:
            def readers() -> dict[int, int]:
                return {p: pp for p, pp in nsqd_clients(port).items() if p != driver.pid}

            while not killed:
                found = wait_until(lambda: readers() or driver.poll() is not None, timeout=120,
                                   interval=0.02,
                                   message="an executor's Python worker reading from nsqd")
                assert driver.poll() is None, log.read_text()[-3000:]
                pid = next(iter(found))
                if not nsqd_clients(port, [pid]):  # its read ended since the scan
                    continue
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
        finally:
            holder.release()

    one_run(spark, nsqd, tmp_path, [*executors(nsqd, RETRYING), "readIdleTimeout=1.0"],
            kill_a_reader)
    assert killed
    # Mid-read: the killed worker held messages unanswered, which nsqd timed out and
    # redelivered (only the pipeline's connections have msgTimeout=4 s).
    assert channel_stats(nsqd, TOPIC, "parquet")["timeout_count"] > 0


def test_read_on_executors_a_worker_dying_between_segment_write_and_fins_repeats_nothing(
    spark: Any, nsqd: NsqdServer, tmp_path: Path
) -> None:
    fault = tmp_path / "fault-fired"
    one_run(spark, nsqd, tmp_path, executors(nsqd, RETRYING), lambda driver, log: None,
            env={"GNSQLITE_SPARK_FAULT_AFTER_WRITE": str(fault)})
    assert fault.exists()  # a worker wrote its segment and exited before its FINs
    # nsqd timed its messages out and redelivered them; they were found in the segment.
    assert channel_stats(nsqd, TOPIC, "parquet")["timeout_count"] > 0
