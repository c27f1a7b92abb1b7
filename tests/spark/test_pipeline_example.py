"""The Spark pipeline example runs end to end by its documented command."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gnsqlite.testing import NsqdServer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_pipeline"


@pytest.mark.slow
def test_pipeline_summarises_every_page_to_parquet_and_nsq(
    nsqd: NsqdServer, tmp_path: Path
) -> None:
    pytest.importorskip("pyspark", reason="the spark extra (PySpark) is not installed")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java 17: none on PATH and no JAVA_HOME")
    out = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE),
            "--pages",
            "300",
            "--per-batch",
            "200",
            "--out",
            str(out),
            "--nsqd-tcp-address",
            nsqd.tcp_address,
            "--timeout",
            "240",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "summaries: 300 pages summarized" in result.stdout
    assert "StackOverflowError" not in result.stderr
    assert list((out / "domain_stats").rglob("*.parquet"))
