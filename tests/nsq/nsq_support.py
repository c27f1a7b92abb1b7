"""Helpers for the pynsq drop-in tests: running programs and reading nsqd's stats."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import gevent.subprocess

from gnsqlite.testing import NsqdServer, wait_until

ROOT = Path(__file__).resolve().parents[2]


def channel_stats(server: NsqdServer, topic: str, channel: str) -> dict[str, Any]:
    return server.channel_stats(topic, channel)


def topic_stats(server: NsqdServer, topic: str) -> dict[str, Any]:
    return server.topic_stats(topic)


def drained(server: NsqdServer, topic: str, channel: str) -> bool:
    return server.channel_drained(topic, channel)


def _default_sigint() -> None:
    """In the child before exec: SIGINT back to the default.

    A test run started in the background by a shell (``cmd &`` without job
    control) inherits SIGINT ignored, and Python then installs no
    KeyboardInterrupt handler, so a program's Ctrl-C would do nothing.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Program:
    """A Python program in a child process whose output lines are collected."""

    def __init__(self, source: str, tmp_path: Path, name: str = "program.py") -> None:
        self.path = tmp_path / name
        self.path.write_text(source)
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        self.process = gevent.subprocess.Popen(
            # faulthandler: a program that does not end is aborted with its stacks (stop())
            [sys.executable, "-u", "-X", "faulthandler", str(self.path)],
            stdout=gevent.subprocess.PIPE,
            stderr=gevent.subprocess.STDOUT,
            env=env,
            cwd=str(tmp_path),
            preexec_fn=_default_sigint,
        )
        self.lines: list[str] = []
        self._reader = gevent.spawn(self._read)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def wait_for(self, predicate: Callable[[list[str]], bool], timeout: float = 20) -> None:
        wait_until(
            lambda: predicate(self.lines) or self.process.poll() is not None,
            timeout=timeout,
            message=f"program output: {self.output}",
        )
        assert predicate(self.lines), self.output

    def count(self, text: str) -> int:
        return sum(text in line for line in self.lines)

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signum)
        try:
            code = self.process.wait(timeout=timeout)
        except gevent.subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGABRT)  # faulthandler prints where it hangs
            self.process.wait(timeout=10)
            self._reader.join(timeout=5)
            raise AssertionError(
                f"the program did not end within {timeout} s of signal {signum}; its output"
                f" and stacks:\n{self.output}"
            ) from None
        self._reader.join(timeout=5)
        return int(code)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._reader.kill()
