"""Running ``python -m gnsqlite`` in a child process, and reading what it prints."""

from __future__ import annotations

import contextlib
import fcntl
import os
import selectors
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

TIMEOUT = 30.0


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def gnsqlite(args: Sequence[str], input: bytes | None = None, timeout: float = TIMEOUT) -> Result:
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


def start(args: Sequence[str], stdin: int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    """Start ``python -m gnsqlite args`` with piped output (stop it with :func:`interrupt`).

    ``stdin=subprocess.PIPE`` gives a pipe the test feeds as slowly as it likes.
    """
    return start_script(["-m", "gnsqlite", *args], stdin)


def start_script(argv: Sequence[str], stdin: int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    """Start ``python argv`` (an example script and its options) like :func:`start`."""
    return subprocess.Popen(
        [sys.executable, *argv],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )


@contextlib.contextmanager
def killed_at_exit(proc: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    """``proc`` for the block; killed after it if still running (a failed assertion)."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


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


def unread_bytes(pipe: IO[bytes]) -> int:
    """Bytes written to ``pipe`` that its reader has not read yet (Linux's FIONREAD)."""
    return struct.unpack("i", fcntl.ioctl(pipe.fileno(), termios.FIONREAD, b"\0" * 4))[0]  # type: ignore[no-any-return]


def interrupt(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> Result:
    """Send SIGINT (Ctrl-C) and wait for the exit; returns everything printed.

    A stdin pipe the test holds stays open: the command must stop on the
    signal alone, not on the end of its input.
    """
    proc.send_signal(signal.SIGINT)
    try:
        out, err = _wait_output(proc, timeout)
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


def _wait_output(proc: subprocess.Popen[bytes], timeout: float) -> tuple[bytes, bytes]:
    """``proc``'s whole stdout and stderr once it exits, leaving its stdin open."""
    assert proc.stdout is not None and proc.stderr is not None
    chunks: dict[Any, list[bytes]] = {proc.stdout: [], proc.stderr: []}
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        for stream in chunks:
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, timeout)
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    chunks[key.fileobj].append(chunk)
                else:
                    selector.unregister(key.fileobj)
    proc.wait(max(0.0, deadline - time.monotonic()) or 0.001)
    return b"".join(chunks[proc.stdout]), b"".join(chunks[proc.stderr])


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
