"""nsq -> Parquet with the WAL source: the driver SIGKILLed mid-stream, restarted, exactly once."""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from spark_support import drained

from gnsqlite.producer import Producer
from gnsqlite.testing import NsqdServer, wait_until

pytestmark = pytest.mark.slow

DRIVER = Path(__file__).resolve().parent / "wal_pipeline_driver.py"
TOPIC = "crash"
TOTAL = 12_000


def start_driver(nsqd: NsqdServer, tmp: Path, log: Path) -> subprocess.Popen[bytes]:
    """The driver in a session of its own, so its JVM and Python workers die with it."""
    return subprocess.Popen(
        [sys.executable, str(DRIVER), nsqd.tcp_address, TOPIC, str(tmp / "wal"),
         str(tmp / "ck"), str(tmp / "out")],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
    )


def kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def committed_rows(spark: Any, out: Path) -> list[Any]:
    """The rows Spark's file sink committed (its _spark_metadata log), not stray files."""
    if not (out / "_spark_metadata").is_dir():
        return []
    schema = "id string, body binary, attempts int"
    return spark.read.schema(schema).parquet(str(out)).select("id", "body").collect()  # type: ignore[no-any-return]


def test_a_sigkilled_driver_restarted_on_its_checkpoint_writes_every_message_once(
    spark: Any, nsqd: NsqdServer, tmp_path: Path
) -> None:
    expected = {f"crash-{i:06d}".encode() for i in range(TOTAL)}
    stop = threading.Event()
    crashed = threading.Event()

    def feed() -> None:
        """Half before the crash (over ~7 s), the other half once the first driver is dead."""
        with Producer(nsqd.tcp_address) as producer:
            ordered = sorted(expected)
            for start in range(0, TOTAL, 200):
                if start == TOTAL // 2 and not crashed.wait(300):
                    return
                producer.multi_publish(TOPIC, ordered[start : start + 200])
                if stop.wait(0.25):
                    return

    log = tmp_path / "driver.log"
    out = tmp_path / "out"
    feeder = threading.Thread(target=feed, daemon=True)
    first = start_driver(nsqd, tmp_path, log)
    try:
        wait_until(lambda: "query started" in log.read_text() or first.poll() is not None,
                   timeout=120, interval=0.2, message="the first driver's query started")
        feeder.start()
        # Mid-stream: some batches are in the Parquet output, half the topic still to come.
        wait_until(lambda: len(committed_rows(spark, out)) >= 2000 or first.poll() is not None,
                   timeout=240, interval=0.5, message="the first batches in the output")
        assert first.poll() is None, log.read_text()[-3000:]
        before = len(committed_rows(spark, out))
        assert before < TOTAL
    finally:
        kill(first)
        crashed.set()
    second = start_driver(nsqd, tmp_path, log)
    try:
        feeder.join(60)
        assert not feeder.is_alive()
        wait_until(lambda: len(committed_rows(spark, out)) >= TOTAL or second.poll() is not None,
                   timeout=300, interval=0.5, message=f"{TOTAL} rows in the output")
        assert second.poll() is None, log.read_text()[-3000:]
        # Redeliveries of messages whose FIN died with the first driver (after msgTimeout=4 s)
        # are recognised as already in the WAL and finished: the channel drains.
        wait_until(lambda: drained(nsqd, TOPIC, "parquet"), timeout=60, interval=0.5,
                   message="the channel drained")
    finally:
        kill(second)
        stop.set()
    rows = committed_rows(spark, out)
    bodies = collections.Counter(bytes(r["body"]) for r in rows)
    assert set(bodies) == expected
    assert max(bodies.values()) == 1 and len(rows) == TOTAL
    assert len({r["id"] for r in rows}) == TOTAL
