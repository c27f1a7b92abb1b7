"""examples/pynsq_port: the pynsq program and its one-line port behave alike."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gnsqlite.http import NsqdHTTPClient
from gnsqlite.testing import NsqdServer, wait_until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pynsq_port"
SENTENCES = [b"one", b"two words", b"now three words", b"a b c d", b"e f g h i"]


def stats(server: NsqdServer, topic: str, channel: str | None = None) -> dict[str, Any]:
    for t in server.stats().get("topics", []):
        if t["topic_name"] == topic:
            if channel is None:
                return dict(t)
            for c in t.get("channels", []):
                if c["channel_name"] == channel:
                    return dict(c)
    return {}


def run_program(name: str, nsqd: NsqdServer, tmp_path: Path, graceful: bool = True) -> list[str]:
    out = tmp_path / f"{name}.out"
    with out.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-u", str(EXAMPLE / name), nsqd.tcp_address],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={"PYTHONPATH": str(ROOT)},
        )
        try:
            wait_until(
                lambda: (
                    out.read_text().count(" -> ") == len(SENTENCES) or process.poll() is not None
                ),
                timeout=20,
            )
            process.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
            code = process.wait(timeout=20) if graceful else 0
        finally:
            if process.poll() is None:
                process.kill()
    text = out.read_text()
    assert code == 0, text
    return sorted(line for line in text.splitlines() if " -> " in line)


def test_only_the_import_changes() -> None:
    before = (EXAMPLE / "before.py").read_text().splitlines()
    after = (EXAMPLE / "after.py").read_text().splitlines()
    changed = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    docstring = ('"""', "Ctrl-C", "    python")
    code = [(b, a) for b, a in changed if not b.startswith(docstring)]
    assert code == [("import nsq", "from gnsqlite import nsq")]


def test_the_port_prints_and_publishes_what_pynsq_does(nsqd: NsqdServer, tmp_path: Path) -> None:
    NsqdHTTPClient(nsqd.http_address).mpub("sentences", SENTENCES)
    ported = run_program("after.py", nsqd, tmp_path)
    assert ported == sorted(f"{s.decode()} -> {len(s.split())} words" for s in SENTENCES)
    channel = stats(nsqd, "sentences", "wordcount")
    assert channel["depth"] == 0 and channel["in_flight_count"] == 0
    assert stats(nsqd, "counts")["message_count"] == len(SENTENCES)

    pytest.importorskip("nsq")
    NsqdHTTPClient(nsqd.http_address).mpub("sentences", SENTENCES)
    # pynsq takes seconds to exit after SIGTERM; only its output matters here.
    assert run_program("before.py", nsqd, tmp_path, graceful=False) == ported
