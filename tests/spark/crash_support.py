"""The crash scenarios' pieces: a Spark driver in its own session, a feed, the output check.

Shared by test_wal_exactly_once.py and test_executor_cluster.py.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spark_support import drained

from gnsqlite.producer import Producer
from gnsqlite.testing import NsqdServer, wait_until

DRIVER = Path(__file__).resolve().parent / "wal_pipeline_driver.py"
TOPIC = "crash"
TOTAL = 12_000
#: A task retried up to 4 times: a worker killed mid-read fails its task, not the query.
RETRYING = "local[2,4]"


def start_driver(
    nsqd: NsqdServer, tmp: Path, log: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """The driver in a session of its own, so its JVM and Python workers die with it."""
    return subprocess.Popen(
        [
            sys.executable,
            str(DRIVER),
            nsqd.tcp_address,
            TOPIC,
            str(tmp / "wal"),
            str(tmp / "ck"),
            str(tmp / "out"),
            *args,
        ],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=None if env is None else {**os.environ, **env},
    )


def executors(nsqd: NsqdServer, master: str = "local[2]") -> list[str]:
    """The driver's arguments for ``readOn=executors`` on ``master``."""
    return [
        master,
        "readOn=executors",
        f"nsqdHttpAddresses={nsqd.http_address}",
        "readIdleTimeout=0.3",
    ]


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


class Feeder:
    """Publishes ``total`` bodies, 200 every 0.25 s; with ``hold``, half, then waits for it."""

    def __init__(self, nsqd: NsqdServer, total: int, hold: threading.Event | None = None):
        self.expected = {f"crash-{i:06d}".encode() for i in range(total)}
        self._ordered = sorted(self.expected)  # what this feeder publishes (others may add)
        self.stop = threading.Event()
        self._nsqd, self._hold = nsqd, hold
        self.thread = threading.Thread(target=self._feed, daemon=True)

    def _feed(self) -> None:
        with Producer(self._nsqd.tcp_address) as producer:
            ordered = self._ordered
            for start in range(0, len(ordered), 200):
                if start == len(ordered) // 2 and self._hold and not self._hold.wait(300):
                    return
                producer.multi_publish(TOPIC, ordered[start : start + 200])
                if self.stop.wait(0.25):
                    return


def finish(
    spark: Any,
    nsqd: NsqdServer,
    driver: subprocess.Popen[bytes],
    feeder: Feeder,
    out: Path,
    log: Path,
) -> None:
    """Wait for every row in the output and the channel drained; check each body is there once."""
    try:
        feeder.thread.join(120)
        assert not feeder.thread.is_alive()
        total = len(feeder.expected)
        wait_until(
            lambda: len(committed_rows(spark, out)) >= total or driver.poll() is not None,
            timeout=300,
            interval=0.5,
            message=f"{total} rows in the output",
        )
        assert driver.poll() is None, log.read_text()[-3000:]
        # Redeliveries of messages whose FIN died (after msgTimeout=4 s) are recognised as
        # already in the WAL and finished: the channel drains.
        wait_until(
            lambda: drained(nsqd, TOPIC, "parquet"),
            timeout=60,
            interval=0.5,
            message="the channel drained",
        )
    finally:
        kill(driver)
        feeder.stop.set()
    rows = committed_rows(spark, out)
    bodies = collections.Counter(bytes(r["body"]) for r in rows)
    assert set(bodies) == feeder.expected
    assert max(bodies.values()) == 1 and len(rows) == len(feeder.expected)
    assert len({r["id"] for r in rows}) == len(feeder.expected)


def wait_started(driver: subprocess.Popen[bytes], log: Path) -> None:
    wait_until(
        lambda: "query started" in log.read_text() or driver.poll() is not None,
        timeout=120,
        interval=0.2,
        message="the driver's query started",
    )
    assert driver.poll() is None, log.read_text()[-3000:]


def driver_killed_mid_stream(
    spark: Any, nsqd: NsqdServer, tmp_path: Path, args: list[str], total: int = TOTAL
) -> None:
    """SIGKILL the driver once batches are in the output, restart it on its checkpoint."""
    crashed = threading.Event()
    feeder = Feeder(nsqd, total, hold=crashed)
    log, out = tmp_path / "driver.log", tmp_path / "out"
    first = start_driver(nsqd, tmp_path, log, *args)
    try:
        wait_started(first, log)
        feeder.thread.start()
        # Mid-stream: some batches are in the Parquet output, half the topic still to come.
        wait_until(
            lambda: len(committed_rows(spark, out)) >= total // 6 or first.poll() is not None,
            timeout=240,
            interval=0.5,
            message="the first batches in the output",
        )
        assert first.poll() is None, log.read_text()[-3000:]
        assert len(committed_rows(spark, out)) < total
    finally:
        kill(first)
        crashed.set()
    finish(spark, nsqd, start_driver(nsqd, tmp_path, log, *args), feeder, out, log)


def one_run(
    spark: Any,
    nsqd: NsqdServer,
    tmp_path: Path,
    args: list[str],
    during: Callable[[subprocess.Popen[bytes], Path, Feeder], None],
    env: dict[str, str] | None = None,
    total: int = 6000,
) -> None:
    """One driver; ``during(driver, log, feeder)`` runs once the feed started."""
    feeder = Feeder(nsqd, total)
    log, out = tmp_path / "driver.log", tmp_path / "out"
    driver = start_driver(nsqd, tmp_path, log, *args, env=env)
    try:
        wait_started(driver, log)
        feeder.thread.start()
        during(driver, log, feeder)
    except BaseException:
        kill(driver)
        feeder.stop.set()
        raise
    finish(spark, nsqd, driver, feeder, out, log)


class Holder:
    """A client of the pipeline's channel holding ``count`` messages unanswered, in a hub thread.

    The planner counts them as in flight, so a batch's shares exceed what
    the tasks can take at once and each read waits its ``readIdleTimeout``
    with its messages unanswered: long enough to be seen and killed.
    """

    def __init__(self, nsqd: NsqdServer, count: int) -> None:
        from gnsqlite.consumer import Consumer
        from gnsqlite.spark._hub import HubThread

        self.held: list[Any] = []
        self.hub = HubThread("holder")
        self.hub.start()

        def hold(message: Any) -> None:
            message.enable_async()
            self.held.append(message)

        self.consumer = self.hub.call(
            lambda: Consumer(
                TOPIC, "parquet", hold, max_in_flight=count, nsqd_tcp_addresses=[nsqd.tcp_address]
            )
        )
        self.hub.call(self.consumer.start)

    def release(self) -> None:
        def give_back() -> None:
            for message in self.held:
                message.requeue(0.0, backoff=False)
            self.consumer.close(5.0)

        self.hub.call(give_back)
        self.hub.stop()
