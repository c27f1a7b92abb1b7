"""A :class:`~gnsqlite.testing.FaultProxy` in a child process, driven over a pipe.

A long run that measures its own memory (``benchmarks/soak.py``) must not
count the proxy's threads, sockets and buffers as its own:
:class:`ProxyProcess` runs the proxy in ``python -m
gnsqlite.testing.proxy_process TARGET`` and sends each fault as one line on
the child's stdin; the child answers each with one line on its stdout.
It offers the fault methods :class:`~gnsqlite.testing.faults.FaultInjector`
calls (:meth:`~ProxyProcess.cut`, :meth:`~ProxyProcess.half_close`,
:meth:`~ProxyProcess.stall`, :meth:`~ProxyProcess.resume`,
:meth:`~ProxyProcess.delay`).

The pipes are gevent's (:mod:`gevent.subprocess`): a call blocks only the
calling greenlet, for the round trip to the child (well under a millisecond
on an idle machine); calls from several greenlets take turns. Constructing
starts nothing; :meth:`~ProxyProcess.start` starts the child and
:meth:`~ProxyProcess.close` ends it.
"""

from __future__ import annotations

import subprocess
import sys
from types import TracebackType
from typing import IO

import gevent.lock
import gevent.subprocess

from .faults import rss_bytes
from .proxy import FaultProxy

__all__ = ["ProxyProcess", "main"]

_TOWARD = ("client", "server")


class ProxyProcess:
    """A :class:`~gnsqlite.testing.FaultProxy` to ``target`` (``"host:port"``) in a child."""

    def __init__(self, target: str, start_timeout: float = 15.0) -> None:
        self.target = target
        self.start_timeout = start_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._address: str | None = None
        self._turn = gevent.lock.Semaphore()  # one command and its answer at a time

    @property
    def address(self) -> str:
        """``"127.0.0.1:port"`` for the client (known once started)."""
        if self._address is None:
            raise RuntimeError("ProxyProcess.address is known once start() has run")
        return self._address

    @property
    def pid(self) -> int | None:
        """The child's process id (``None`` before :meth:`start`)."""
        return None if self._proc is None else int(self._proc.pid)

    def start(self) -> ProxyProcess:
        """Start the child and block (at most ``start_timeout`` s) until it listens."""
        self._proc = gevent.subprocess.Popen(
            [sys.executable, "-m", __name__, self.target],
            stdin=gevent.subprocess.PIPE,
            stdout=gevent.subprocess.PIPE,
        )
        with gevent.Timeout(self.start_timeout, TimeoutError("proxy process did not start")):
            self._address = self._reply()
        return self

    def cut(self) -> int:
        """Reset every current connection; returns how many (see :meth:`FaultProxy.cut`)."""
        return int(self._call("cut"))

    def half_close(self, toward: str = "client") -> int:
        """FIN toward ``"client"`` or ``"server"`` on every current connection; returns how many."""
        if toward not in _TOWARD:
            raise ValueError(f"toward must be 'client' or 'server', not {toward!r}")
        return int(self._call(f"half_close {toward}"))

    def stall(self) -> None:
        """Stop forwarding both ways without closing anything (see :meth:`FaultProxy.stall`)."""
        self._call("stall")

    def resume(self) -> None:
        """Forward again after :meth:`stall`."""
        self._call("resume")

    def delay(self, seconds: float) -> None:
        """Hold every chunk ``seconds`` before forwarding it (0: no delay)."""
        if seconds < 0:
            raise ValueError(f"delay must be 0 s or more, not {seconds!r}")
        self._call(f"delay {float(seconds)!r}")

    def rss_bytes(self) -> int:
        """The child's resident set size in bytes (0 where ``/proc`` is missing)."""
        return int(self._call("rss"))

    def close(self) -> None:
        """Close the proxy (every connection through it) and wait for the child to exit."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.close()  # end-of-input: the child closes its proxy and exits
            proc.wait(timeout=10.0)
        except (OSError, gevent.subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()

    def __enter__(self) -> ProxyProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _call(self, line: str) -> str:
        if self._proc is None or self._proc.stdin is None:
            raise RuntimeError("the proxy process is not running: call start() first")
        with self._turn:
            self._proc.stdin.write(line.encode() + b"\n")
            self._proc.stdin.flush()
            return self._reply()

    def _reply(self) -> str:
        assert self._proc is not None and self._proc.stdout is not None
        answer: str = self._proc.stdout.readline().decode().strip()
        if not answer:
            raise RuntimeError(f"the proxy process for {self.target} exited")
        if answer.startswith("error:"):
            raise RuntimeError(f"the proxy process for {self.target} answered {answer!r}")
        return answer


def serve(proxy: FaultProxy, commands: IO[str], answers: IO[str]) -> None:
    """Apply each command line of ``commands`` to ``proxy``, one answer line each, until EOF."""
    for line in commands:
        name, _, arg = line.strip().partition(" ")
        result: object = ""
        if name == "cut":
            result = proxy.cut()
        elif name == "half_close":
            result = proxy.half_close(arg)
        elif name == "stall":
            proxy.stall()
        elif name == "resume":
            proxy.resume()
        elif name == "delay":
            proxy.delay(float(arg))
        elif name == "rss":
            result = rss_bytes()
        else:
            result = f"error: unknown command {name!r}"
        answers.write(f"{result if result != '' else 'ok'}\n")
        answers.flush()


def main(argv: list[str] | None = None) -> int:
    """The child: ``python -m gnsqlite.testing.proxy_process HOST:PORT``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m gnsqlite.testing.proxy_process HOST:PORT\n")
        return 2
    with FaultProxy(args[0]) as proxy:
        sys.stdout.write(proxy.address + "\n")
        sys.stdout.flush()
        serve(proxy, sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
