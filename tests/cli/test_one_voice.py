"""One voice: the same failure worded the same by every subcommand and example, one exit rule.

Before, connection refused read four ways (``cannot reach nsqd at A: [Errno
111] Connection refused``, ``A: GET /stats failed: [Errno 111] ...``, the
address twice in ``dashboard``, ``crawler: A: connect failed: ...``), and
``tail -n`` exited 0 when Ctrl-C came before its messages while ``pub`` exited
130. docs/cli.md states the rule these tests hold.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import interrupt, start

from gnsqlite.testing import free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]

#: program name -> the argv after ``python``, with ADDR where the address goes
COMMANDS = {
    "gnsqlite tail": ["-m", "gnsqlite", "tail", "--topic", "t", "--nsqd-tcp-address", "ADDR"],
    "gnsqlite pub": ["-m", "gnsqlite", "pub", "--topic", "t", "--nsqd-tcp-address", "ADDR"],
    "gnsqlite pub --from-dead-letter": [
        "-m",
        "gnsqlite",
        "pub",
        "--from-dead-letter",
        "t.dead",
        "--to",
        "t",
        "--nsqd-tcp-address",
        "ADDR",
    ],
    "gnsqlite stats": ["-m", "gnsqlite", "stats", "--nsqd-http-address", "ADDR"],
    "gnsqlite dashboard": [
        "-m",
        "gnsqlite",
        "dashboard",
        "--nsqd-http-address",
        "ADDR",
        "--port",
        "0",
    ],
    "gnsqlite bench": ["-m", "gnsqlite", "bench", "publish", "--nsqd-tcp-address", "ADDR"],
    "crawler": [str(ROOT / "examples/crawler"), "--nsqd-tcp-address", "ADDR"],
    "batch_consumer": [str(ROOT / "examples/batch_consumer.py"), "--nsqd-tcp-address", "ADDR"],
    "dead_letters": [str(ROOT / "examples/dead_letters.py"), "--nsqd-tcp-address", "ADDR"],
}


@pytest.mark.no_server
@pytest.mark.parametrize("program", list(COMMANDS))
def test_connection_refused_is_worded_one_way(program: str) -> None:
    address = f"127.0.0.1:{free_port('127.0.0.1')}"
    argv = [a.replace("ADDR", address) for a in COMMANDS[program]]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, *argv], input=b"x\n", capture_output=True, timeout=60, env=env
    )
    what = "gnsqlite pub" if program.startswith("gnsqlite pub") else program
    assert done.stderr.decode() == (
        f"{what}: error: cannot reach nsqd at {address}: Connection refused\n"
    ), done
    assert done.returncode == 1


@pytest.mark.parametrize(
    ("extra", "status"),
    [
        (["-n", "5"], 130),  # 1 of the 5 asked for when Ctrl-C came: a job cut short
        ([], 0),  # running until stopped was the job
    ],
    ids=["tail -n 5", "tail"],
)
def test_ctrl_c_ends_tail_with_the_rule_s_status(nsqd: Any, extra: list[str], status: int) -> None:
    nsqd.http.create_topic("few")
    proc = start(["tail", "--topic", "few", "--nsqd-tcp-address", nsqd.tcp_address, *extra])
    try:
        nsqd.http.pub("few", b"only one")
        wait_until(
            # delivered once, then neither queued nor in flight: finished (a channel just
            # made shows (0, 0, 0) before the topic hands it the message)
            lambda: _channel_counts(nsqd, "few") == (0, 0, 1),
            timeout=15,
            message="tail subscribed and printed the one message",
        )
    finally:
        result = interrupt(proc)
    assert result.returncode == status, result
    assert result.stdout == "only one\n"


def _channel_counts(nsqd: Any, topic: str) -> tuple[int, int, int] | None:
    """The first channel's depth, messages in flight and messages ever delivered to it."""
    for t in nsqd.stats(topic=topic).get("topics") or []:
        for c in t["channels"] or []:
            return int(c["depth"]), int(c["in_flight_count"]), int(c["message_count"])
    return None
