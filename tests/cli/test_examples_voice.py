"""The examples speak as the commands do: they say what they wait for, one line a failure.

Before, ``examples/batch_consumer.py`` sat silent while it waited and exited 0
when Ctrl-C cut its ``--count`` short; ``examples/dead_letters.py`` printed a
full traceback for each failure it causes on purpose (8 with its defaults).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from cli_helpers import _env, interrupt, read_until, start_script

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_batch_consumer_says_what_it_waits_for_and_follows_the_exit_rule(nsqd: Any) -> None:
    base = [str(EXAMPLES / "batch_consumer.py"), "--nsqd-tcp-address", nsqd.tcp_address]
    for extra, status in (([], 0), (["--count", "5"], 130)):
        proc = start_script([*base, *extra])
        try:
            said = read_until(proc, "until", timeout=30)  # nothing was published: it waits
        finally:
            result = interrupt(proc)
        assert said.startswith(
            f"waiting for messages on events/batch at {nsqd.tcp_address}, stored in batches"
            " of up to 100 (or every 1 s), until "
        ), said
        assert ("5 messages" in said) == bool(extra), said
        # Ctrl-C ends a run until stopped (0) but cuts a --count job short (130)
        assert result.returncode == status, (extra, result)
        assert "Traceback" not in result.stderr


def test_dead_letters_says_each_failure_it_causes_in_one_line(nsqd: Any) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "dead_letters.py"),
            "--nsqd-tcp-address",
            nsqd.tcp_address,
            "--orders",
            "10",
            "--poison-every",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )
    assert done.returncode == 0, done.stderr
    assert "done: 10 orders billed" in done.stdout
    lines = done.stderr.splitlines()
    assert lines and "Traceback" not in done.stderr, done.stderr
    for line in lines:  # orders 0 and 5 fail twice each before they are dead-lettered
        assert line.startswith("dead_letters: error: <Consumer orders/billing"), line
        assert "handler failed on" in line and "(KeyError: 'order " in line, line
