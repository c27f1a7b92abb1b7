"""The pipeline example on a real Spark standalone cluster (master + worker on 127.0.0.1).

Starts ``org.apache.spark.deploy.master.Master`` and ``...worker.Worker`` with
the ``spark-class`` of the installed PySpark wheel, waits until the worker is
registered, runs ``examples/spark_pipeline`` through ``spark-submit`` as
``examples/spark_pipeline/README.md`` shows, and checks the results and that
the application ran on the cluster. The WAL is a local directory: master,
worker and executors share this machine, so it is storage every executor
reads (on a real cluster it must be a shared filesystem, HDFS or S3).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gnsqlite.testing import NsqdServer, wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "spark_pipeline"


def spark_bin() -> Path:
    """The ``bin`` directory of the installed PySpark (``spark-class``, ``spark-submit``)."""
    pytest.importorskip("pyspark", reason="the spark extra (PySpark) is not installed")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java 17: none on PATH and no JAVA_HOME")
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home()) / "bin"


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def master_state(webui_port: int) -> dict[str, Any]:
    """The master's state from its web UI (``/json/``): workers, applications."""
    with urllib.request.urlopen(f"http://127.0.0.1:{webui_port}/json/", timeout=5) as resp:
        state: dict[str, Any] = json.load(resp)
    return state


def alive_workers(webui_port: int) -> int:
    """How many workers the master lists as ALIVE; 0 while its UI is not up yet.

    Right after binding its port the master's UI may answer ``/json/`` with an
    HTML page (seen in a CI run: the master was a second old), so an answer that
    is not JSON counts as "not up yet", like a refused connection.
    """
    try:
        state = master_state(webui_port)
    except (OSError, ValueError):
        return 0
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, then SIGKILL what is left."""
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 15)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[tuple[str, int, dict[str, str]]]:
    """A master and a worker (2 cores, 1 GiB); yields the master URL, its UI port, the env."""
    bin_dir = spark_bin()
    master_port, master_ui, worker_port, worker_ui = free_ports(4)
    env = dict(os.environ)
    env.update(
        {
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_WORKER_DIR": str(tmp_path / "worker"),
            "SPARK_LOG_DIR": str(tmp_path / "logs"),
            "SPARK_HOME": str(bin_dir.parent),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            # Executors import gnsqlite from the same tree as this test.
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p),
        }
    )
    url = f"spark://127.0.0.1:{master_port}"
    logs = tmp_path / "logs"
    logs.mkdir()
    procs: list[subprocess.Popen[bytes]] = []

    def launch(name: str, *args: str) -> None:
        log = (logs / f"{name}.log").open("ab")
        procs.append(
            subprocess.Popen(
                [str(bin_dir / "spark-class"), *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    try:
        launch(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(master_port),
            "--webui-port",
            str(master_ui),
        )
        launch(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--port",
            str(worker_port),
            "--webui-port",
            str(worker_ui),
            "--cores",
            "2",
            "--memory",
            "1g",
            "--work-dir",
            str(tmp_path / "worker"),
            url,
        )
        wait_until(
            lambda: alive_workers(master_ui) == 1 or any(p.poll() is not None for p in procs),
            timeout=120,
            interval=0.5,
            message="the worker registered with the master",
        )
        dead = [p.args for p in procs if p.poll() is not None]
        assert not dead, f"{dead} ended: " + "".join(
            f.read_text()[-2000:] for f in logs.glob("*.log")
        )
        yield url, master_ui, env
    finally:
        for proc in reversed(procs):
            stop(proc)


def test_pipeline_example_runs_through_spark_submit_on_a_standalone_cluster(
    standalone: tuple[str, int, dict[str, str]], nsqd: NsqdServer, tmp_path: Path
) -> None:
    url, master_ui, env = standalone
    out = tmp_path / "out"
    # The command of examples/spark_pipeline/README.md, with test sizes and this nsqd.
    submit = subprocess.Popen(
        [
            str(spark_bin() / "spark-submit"),
            "--master",
            url,
            str(EXAMPLE / "__main__.py"),
            "--master",
            url,
            "--pages",
            "300",
            "--per-batch",
            "200",
            "--out",
            str(out),
            "--wal",
            str(out / "wal"),
            "--nsqd-tcp-address",
            nsqd.tcp_address,
            "--timeout",
            "240",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        stdout, stderr = submit.communicate(timeout=360)
    finally:
        stop(submit)
    text, errors = stdout.decode(errors="replace"), stderr.decode(errors="replace")
    assert submit.returncode == 0, text[-2000:] + errors[-3000:]
    assert "summaries: 300 pages summarized" in text
    assert list((out / "domain_stats").rglob("*.parquet"))
    # It ran on the cluster: the master lists the application, with executors on the worker.
    apps = master_state(master_ui)
    names = [a["name"] for a in apps.get("activeapps", []) + apps.get("completedapps", [])]
    assert "gnsqlite-spark-pipeline" in names, apps
    # Every page counted once in the per-domain Parquet rows.
    import pyarrow.parquet as pq

    assert sum(pq.read_table(out / "domain_stats").column("pages").to_pylist()) == 300
