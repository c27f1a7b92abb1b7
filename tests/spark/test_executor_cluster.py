"""readOn=executors on local-cluster[2,1,1024]: nsqd's clients are the executors' Python workers.

Two executor JVMs on this machine, each with its own Python workers. While
batches run, the test reads the process table (``/proc``): every process
with a connection to nsqd's TCP port descends, through its Python parents,
from a JVM running ``CoarseGrainedExecutorBackend`` (an executor), none
from the driver's JVM or Python; and both executors read. Then the output
holds every message once.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from crash_support import TOPIC, Feeder, Holder, executors, one_run
from spark_support import nsqd_clients, process_name

from gnsqlite.producer import Producer
from gnsqlite.testing import NsqdServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def parent(pid: int) -> int:
    """The parent of ``pid`` (0 once it ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


def first_jvm(pid: int) -> tuple[int, str]:
    """The nearest ancestor of ``pid`` running java: its pid and command line ((0, "") if none)."""
    while pid > 1:
        pid = parent(pid)
        name = process_name(pid)
        if name.split(" ", 1)[0].endswith("java"):
            return pid, name
    return 0, ""


def cluster_env() -> dict[str, str]:
    """local-cluster launches executor JVMs with spark-class: it needs SPARK_HOME."""
    from pyspark.find_spark_home import _find_spark_home

    return {
        "SPARK_HOME": _find_spark_home(),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }


def test_on_a_local_cluster_every_nsqd_connection_is_an_executors_python_worker(
    spark: Any, nsqd: NsqdServer, tmp_path: Path
) -> None:
    port = int(nsqd.tcp_address.rsplit(":", 1)[1])
    readers: dict[int, tuple[int, str, str]] = {}  # pid -> its nearest JVM, name; its name

    def executors_seen() -> set[int]:
        for pid in nsqd_clients(port):
            if pid not in readers:
                readers[pid] = (*first_jvm(pid), process_name(pid))
        return {jvm for jvm, name, _ in readers.values() if "CoarseGrainedExecutorBackend" in name}

    def watch(driver: Any, log: Path, feeder: Feeder) -> None:
        """Scan every 20 ms; while both executors were not seen, publish 20 more every 0.25 s."""
        holder = Holder(nsqd, 20)  # the reads wait readIdleTimeout: long enough to be seen
        deadline = time.monotonic() + 180
        try:
            with Producer(nsqd.tcp_address) as producer:
                for n in itertools.count():
                    for _ in range(12):
                        if len(executors_seen()) >= 2 or driver.poll() is not None:
                            return
                        time.sleep(0.02)
                    assert time.monotonic() < deadline, f"both executors reading: {readers}"
                    more = {f"more-{n:05d}-{i:02d}".encode() for i in range(20)}
                    feeder.expected |= more  # the output must hold these once too
                    producer.multi_publish(TOPIC, sorted(more))
        finally:
            holder.release()

    one_run(
        spark,
        nsqd,
        tmp_path,
        [*executors(nsqd, "local-cluster[2,1,1024]"), "readIdleTimeout=1.0"],
        watch,
        env=cluster_env(),
        total=3000,
    )
    assert len(executors_seen()) == 2, readers
    not_executor = {
        pid: jvm for pid, jvm in readers.items() if "CoarseGrainedExecutorBackend" not in jvm[1]
    }
    assert not not_executor, f"nsqd clients outside the executors: {not_executor}"
    # Each reader is a Python worker of an executor (pyspark.daemon's child), not a JVM.
    assert all("pyspark" in name for _, _, name in readers.values()), readers
