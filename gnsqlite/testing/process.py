"""Running a server as a child process for tests: start, wait until it answers, stop.

:class:`ServerProcess` starts an argv with its stderr in a temporary file,
waits until ``GET /ping`` answers on the HTTP address (failing fast, with the
process's stderr in the error, if it exits or does not answer in time), and
stops it with SIGTERM, then SIGKILL after a timeout. Every process still
running is killed by :func:`kill_all`, which the pytest plugin calls at the end
of the session and :mod:`atexit` calls at exit, so none leaks.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import IO

import gevent
import gevent.socket
import gevent.subprocess

from ..errors import NSQError
from ..http_transport import HTTPError, http_request

__all__ = ["ServerProcess", "ServerStartError", "free_port", "kill_all", "listens"]

log = logging.getLogger(__name__)

_STDERR_TAIL = 8000
_RUNNING: set[ServerProcess] = set()


class ServerStartError(NSQError, RuntimeError):
    """A server process exited or did not answer ``/ping`` in time."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
    with gevent.socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def listens(pid: int, port: int) -> bool | None:
    """Whether process ``pid`` holds the TCP socket listening on ``port``; ``None``: cannot tell.

    Read from ``/proc`` (Linux): the listening sockets' inodes in
    ``/proc/net/tcp{,6}``, then ``pid``'s open files. Elsewhere, or when
    ``/proc`` refuses, ``None``.
    """
    inodes = set()
    try:
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as f:
                next(f, None)  # the header
                for line in f:
                    fields = line.split()
                    # local address "ADDR:PORT" in hex, state 0A: LISTEN, inode tenth
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(f"socket:[{fields[9]}]")
        if not inodes:
            return False
        fd_dir = f"/proc/{pid}/fd"
        for fd in os.listdir(fd_dir):
            with contextlib.suppress(OSError):  # closed meanwhile
                if os.readlink(os.path.join(fd_dir, fd)) in inodes:
                    return True
    except (OSError, ValueError, IndexError):
        return None
    return False


def _append_only_tempfile() -> IO[bytes]:
    # O_APPEND: the child always writes at the end, whatever offset we read at.
    fd, path = tempfile.mkstemp(prefix="gnsqlite-", suffix=".log")
    os.close(fd)
    try:
        return open(path, "a+b")
    finally:
        os.unlink(path)


class ServerProcess:
    """One child process serving HTTP at ``http_address`` once ready."""

    def __init__(
        self,
        argv: Sequence[str],
        http_address: str,
        name: str,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.argv = list(argv)
        self.http_address = http_address
        self.name = name
        self.env = dict(env) if env is not None else None
        self.returncode: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    def __repr__(self) -> str:
        pid = self._proc.pid if self._proc is not None else None
        return f"<ServerProcess {self.name} pid={pid} http={self.http_address}>"

    @property
    def pid(self) -> int | None:
        """The process id while running."""
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        """Whether the process was started and has not exited."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def exit_status(self) -> int | None:
        """The status the process exited with (or was stopped with); ``None`` while it runs."""
        return self._proc.poll() if self._proc is not None else self.returncode

    def launch(self) -> None:
        """Start the process; does not wait for it to be ready."""
        if self._proc is not None:
            return
        self._stderr = _append_only_tempfile()
        env = None
        if self.env is not None:
            env = {**os.environ, **self.env}
        try:
            # gevent's Popen, not the stdlib's: once anything in the process
            # uses gevent.subprocess, gevent's SIGCHLD watcher reaps every child,
            # and a stdlib Popen would then report a crashed server as status 0.
            self._proc = gevent.subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._stderr,
                stderr=self._stderr,
                env=env,
            )
        except OSError as exc:  # no such binary, not executable ...
            self._stderr.close()
            self._stderr = None
            raise ServerStartError(f"cannot run {self.name} ({self.argv[0]}): {exc}") from exc
        self.returncode = None
        _RUNNING.add(self)
        log.debug("started %s: %s", self, " ".join(self.argv))

    def wait_ready(self, timeout: float = 15.0) -> None:
        """Block until ``/ping`` answers; raises :class:`ServerStartError` on failure.

        On failure the process is killed and the error carries its stderr.
        """
        proc = self._proc
        if proc is None:
            raise ServerStartError(f"{self.name} was not launched")
        deadline = time.monotonic() + timeout
        port = int(self.http_address.rsplit(":", 1)[1])
        while True:
            if proc.poll() is not None:
                self._fail(f"{self.name} exited with status {proc.returncode} while starting")
            try:
                http_request(self.http_address, "GET", "/ping", timeout=1.0)
                answered = True
            except HTTPError as exc:
                # nsqd --tls-required=true: HTTP answers, but only over HTTPS
                answered = exc.status == 403 and b"TLS_REQUIRED" in exc.body
            except (NSQError, OSError):
                answered = False
            # Another process may hold the port (taken between free_port() and the
            # child's bind, by another test run): it answers, and this child exits
            # with "address already in use", which the caller retries on new ports.
            if answered and listens(proc.pid, port) is not False:
                return
            if time.monotonic() > deadline:
                self._fail(
                    f"{self.name} did not answer /ping at {self.http_address} within {timeout} s"
                )
            gevent.sleep(0.02)

    def _fail(self, message: str) -> None:
        self.kill()
        raise ServerStartError(
            f"{message}\ncommand: {' '.join(self.argv)}\n--- stderr ---\n{self.stderr_text()}"
        )

    def stderr_text(self) -> str:
        """The last few KB the process wrote to stdout/stderr."""
        if self._stderr is None:
            return ""
        self._stderr.flush()
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - _STDERR_TAIL))
        return self._stderr.read().decode("utf-8", "replace")

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL; returns the exit status.

        Blocks the calling greenlet. Safe to call when not running.
        """
        proc = self._proc
        if proc is None:
            return self.returncode
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while proc.poll() is None and time.monotonic() < deadline:
                gevent.sleep(0.02)
            if proc.poll() is None:
                log.warning("%s did not exit %s s after SIGTERM; killing it", self, timeout)
                proc.kill()
                proc.wait()
        self._finish(proc)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL at once and reap the process."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        self._finish(proc)

    def _finish(self, proc: subprocess.Popen[bytes]) -> None:
        self.returncode = proc.returncode
        self._proc = None
        _RUNNING.discard(self)
        if self._stderr is not None and self.returncode not in (0, None):
            log.debug("%s exited %s; stderr:\n%s", self.name, self.returncode, self.stderr_text())

    def close(self) -> None:
        """Stop (or kill) the process and drop its captured output."""
        self.stop()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


def kill_all() -> None:
    """Kill every server process this module started that is still running."""
    for server in list(_RUNNING):
        with contextlib.suppress(OSError):
            server.kill()


def _kill_all_at_exit() -> None:
    with contextlib.suppress(Exception):
        kill_all()


atexit.register(_kill_all_at_exit)
