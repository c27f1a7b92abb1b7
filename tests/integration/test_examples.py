"""The examples run end to end against a live nsqd."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from gnsqlite.testing import NsqdServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_batch_consumer_flushes_full_batches_on_starvation(nsqd: NsqdServer) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "batch_consumer.py"),
            "--nsqd-tcp-address",
            nsqd.tcp_address,
            "--publish",
            "950",
            "--count",
            "950",
            "--max-in-flight",
            "100",
            "--flush-timeout",
            "0.5",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    batches = [
        (int(size), reason)
        for size, reason in re.findall(r"processed a batch of (\d+) \((\w+)\)", result.stdout)
    ]
    assert sum(size for size, _ in batches) == 950
    starved = [size for size, reason in batches if reason == "starved"]
    assert len(starved) >= 5
    assert all(size >= 85 for size in starved), batches
    assert "done: 950 messages" in result.stdout
