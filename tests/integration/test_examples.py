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


def test_dead_letters_example_sets_poison_aside_then_bills_it_once_republished(
    nsqd: NsqdServer,
) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "dead_letters.py"), "--nsqd-tcp-address",
         nsqd.tcp_address, "--orders", "23", "--poison-every", "5"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "billed 18 orders; 5 dead-lettered" in result.stdout
    letters = re.findall(r"dead letter \w{16} from orders/billing after 3 attempts \(KeyError: "
                         r"'order (\d+) has no customer'\)", result.stdout)  # fmt: skip
    assert sorted(map(int, letters)) == [0, 5, 10, 15, 20]
    assert "done: 23 orders billed, 5 of them after re-publishing their dead letters:" \
        " [0, 5, 10, 15, 20]" in result.stdout
