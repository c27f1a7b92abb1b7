"""Smoke test of an installed gnsqlite wheel; run by ``.ci/release.py`` inside a clean virtualenv.

Usage: ``<venv>/bin/python release_smoke.py VERSION BUILD`` from a directory outside the
checkout (so the checkout's ``gnsqlite/`` cannot be imported); BUILD is ``pure`` or
``compiled``, the wheel installed. Checks, in order:

1. ``gnsqlite`` imports from the virtualenv's site-packages, not from a checkout, and
   ``gnsqlite.compiled`` says BUILD;
2. ``gnsqlite --version`` (the console script) prints VERSION and BUILD;
3. a publish/consume round trip on the embedded broker (``python -m gnsqlite.broker``
   on free ports, ``Producer`` then ``Consumer``; the body must come back unchanged);
4. ``gnsqlite dashboard`` (the ``[dashboard]`` extra) serves its index page and every
   static asset, byte for byte as shipped in the package.

Exits 0 when all pass; otherwise prints ``release smoke FAILED: <what>`` and exits 1.
Never imported by pytest (it is not under ``tests/``).
"""

from __future__ import annotations

import contextlib
import importlib.resources
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

TIMEOUT = 15.0  # seconds for any one server to come up or one message to arrive


class SmokeFailure(Exception):
    """A check failed; the message says which and what was seen."""


def check(condition: bool, message: str) -> None:
    if not condition:
        raise SmokeFailure(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(ready: Callable[[], bool], proc: subprocess.Popen[bytes], what: str) -> None:
    """Poll ``ready()`` until it is true; fail when ``proc`` exits or TIMEOUT passes."""
    deadline = time.monotonic() + TIMEOUT
    while not ready():
        if proc.poll() is not None:
            out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
            raise SmokeFailure(f"{what} exited with status {proc.returncode}:\n{out}")
        if time.monotonic() > deadline:
            raise SmokeFailure(f"{what} did not come up within {TIMEOUT} s")
        time.sleep(0.1)


def http_get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5.0) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def answers(url: str) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            return http_get(url)[0] == 200
        except OSError:
            return False

    return ready


@contextlib.contextmanager
def running(argv: list[str], what: str) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``argv``; on exit SIGTERM it and require a clean exit (status 0) within TIMEOUT."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            raise SmokeFailure(f"{what} did not stop within {TIMEOUT} s of SIGTERM") from None
    if proc.returncode != 0:
        raise SmokeFailure(
            f"{what} exited with status {proc.returncode}:\n{out.decode(errors='replace')}"
        )


def check_installed(version: str, build: str) -> None:
    import gnsqlite

    where = Path(gnsqlite.__file__).resolve()
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    check(site in where.parents, f"gnsqlite imported from {where}, not from the venv's {site}")
    check(gnsqlite.__version__ == version, f"gnsqlite.__version__ is {gnsqlite.__version__!r}")
    check(
        gnsqlite.compiled is (build == "compiled"),
        f"gnsqlite.compiled is {gnsqlite.compiled!r} in the {build} wheel",
    )
    expected = f"gnsqlite {version} ({'compiled' if build == 'compiled' else 'pure Python'})"
    script = Path(sys.executable).with_name("gnsqlite")
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True)
    check(
        result.returncode == 0 and result.stdout.strip() == expected,
        f"'gnsqlite --version' gave status {result.returncode}, output {result.stdout!r}"
        f" {result.stderr!r}; expected {expected!r}",
    )
    print(f"ok: gnsqlite {version} ({build}) from {where.parent}; 'gnsqlite --version' agrees")


def check_round_trip(tcp: str) -> None:
    import gevent.event

    from gnsqlite.consumer import Consumer
    from gnsqlite.message import Message
    from gnsqlite.producer import Producer

    body = f"release smoke {os.getpid()} {time.time()}".encode()
    with Producer(tcp) as producer:
        producer.publish("release_smoke", body)
    received: gevent.event.AsyncResult[bytes] = gevent.event.AsyncResult()

    def handle(message: Message) -> None:
        received.set(message.body)

    consumer = Consumer("release_smoke", "smoke", handle, nsqd_tcp_addresses=[tcp])
    consumer.start()
    try:
        got = received.get(timeout=TIMEOUT)
    except gevent.Timeout:
        raise SmokeFailure(f"no message consumed within {TIMEOUT} s") from None
    finally:
        consumer.close(timeout=5.0)
    check(got == body, f"consumed {got!r}, published {body!r}")
    print(f"ok: published and consumed {len(body)} bytes through the embedded broker at {tcp}")


def check_dashboard(nsqd_http: str) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    script = str(Path(sys.executable).with_name("gnsqlite"))
    argv = [script, "dashboard", "--nsqd-http-address", nsqd_http, "--port", str(port)]
    with running(argv, "gnsqlite dashboard") as proc:
        wait_until(answers(base + "/"), proc, "gnsqlite dashboard")
        static = importlib.resources.files("gnsqlite.dashboard").joinpath("static")
        shipped = sorted(entry.name for entry in static.iterdir() if entry.is_file())
        check("index.html" in shipped, f"gnsqlite/dashboard/static holds only {shipped}")
        status, index = http_get(base + "/")
        check(status == 200, f"GET / answered {status}")
        check(index == static.joinpath("index.html").read_bytes(), "GET / is not index.html")
        for name in shipped:
            status, data = http_get(f"{base}/{name}")
            check(status == 200, f"GET /{name} answered {status}")
            check(data == static.joinpath(name).read_bytes(), f"GET /{name} differs from the file")
            check(name == "index.html" or name.encode() in index, f"index.html never uses {name}")
    print(f"ok: the dashboard served / and {', '.join('/' + n for n in shipped)}")


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] not in ("pure", "compiled"):
        print("usage: release_smoke.py VERSION pure|compiled", file=sys.stderr)
        return 2
    try:
        here = Path.cwd()
        check(not (here / "gnsqlite").exists(), f"run from outside the checkout, not {here}")
        check_installed(argv[0], argv[1])
        tcp, http = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        broker = [sys.executable, "-m", "gnsqlite.broker"]
        broker += ["--tcp-address", tcp, "--http-address", http]
        with running(broker, "python -m gnsqlite.broker") as proc:
            wait_until(answers(f"http://{http}/ping"), proc, "python -m gnsqlite.broker")
            check_round_trip(tcp)
            check_dashboard(http)
    except SmokeFailure as exc:
        print(f"release smoke FAILED: {exc}", file=sys.stderr)
        return 1
    print("release smoke passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
