"""The examples run end to end against a live nsqd."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

from gnsqlite.testing import NsqdServer, wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_batch_consumer_stores_full_batches_in_sqlite(nsqd: NsqdServer, tmp_path: Path) -> None:
    database = tmp_path / "events.db"
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
            "--batch-size",
            "100",
            "--max-in-flight",
            "200",
            "--batch-timeout",
            "0.5",
            "--database",
            str(database),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    sizes = [int(size) for size in re.findall(r"processed a batch of (\d+)", result.stdout)]
    assert sum(sizes) == 950
    assert all(size <= 100 for size in sizes)
    assert sizes.count(100) >= 5, sizes
    assert "done: 950 messages, 950 rows" in result.stdout
    with sqlite3.connect(database) as db:
        assert db.execute("SELECT count(DISTINCT body) FROM events").fetchone() == (950,)
    wait_until(lambda: nsqd.channel_drained("events", "batch"), timeout=10)


def test_dead_letters_example_sets_poison_aside_then_bills_it_once_republished(
    nsqd: NsqdServer,
) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "dead_letters.py"),
            "--nsqd-tcp-address",
            nsqd.tcp_address,
            "--orders",
            "23",
            "--poison-every",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "billed 18 orders; 5 dead-lettered" in result.stdout
    letters = re.findall(
        r"dead letter \w{16} from orders/billing after 3 attempts \(KeyError: "
        r"'order (\d+) has no customer'\)",
        result.stdout,
    )
    assert sorted(map(int, letters)) == [0, 5, 10, 15, 20]
    assert (
        "done: 23 orders billed, 5 of them after re-publishing their dead letters:"
        " [0, 5, 10, 15, 20]" in result.stdout
    )
