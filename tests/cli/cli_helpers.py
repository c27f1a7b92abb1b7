"""Running ``python -m gnsqlite`` in a child process, and reading what it prints."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

TIMEOUT = 30.0


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def gnsqlite(
    args: Sequence[str], input: bytes | None = None, timeout: float = TIMEOUT
) -> Result:
    """Run ``python -m gnsqlite args`` to the end."""
    done = subprocess.run(
        [sys.executable, "-m", "gnsqlite", *args],
        input=input,
        capture_output=True,
        timeout=timeout,
        env=_env(),
    )
    return Result(
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
    )


def start(args: Sequence[str]) -> subprocess.Popen[bytes]:
    """Start ``python -m gnsqlite args`` with piped output (stop it with :func:`interrupt`)."""
    return subprocess.Popen(
        [sys.executable, "-m", "gnsqlite", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )


def read_until(proc: subprocess.Popen[bytes], text: str, timeout: float = TIMEOUT) -> str:
    """Read ``proc``'s stdout until a line contains ``text``; returns what was read."""
    assert proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while text.encode() not in seen:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise AssertionError(f"no {text!r} in {timeout} s; got {seen!r}")
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                raise AssertionError(f"exited before printing {text!r}: {seen!r}{_err(proc)}")
            seen += chunk
    return seen.decode("utf-8", "replace")


def interrupt(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> Result:
    """Send SIGINT (Ctrl-C) and wait for the exit; returns everything printed."""
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"did not exit {timeout} s after SIGINT: {err!r}") from None
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


def assert_one_line_error(result: Result, status: int, *fragments: str) -> None:
    """A failure: ``status``, one line on stderr naming ``fragments``, no traceback."""
    assert result.returncode == status, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def _err(proc: subprocess.Popen[bytes]) -> str:
    if proc.poll() is None or proc.stderr is None:
        return ""
    return "; stderr: " + proc.stderr.read().decode("utf-8", "replace")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    return env
