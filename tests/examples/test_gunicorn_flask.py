"""examples/gunicorn_flask: real gunicorn, two gevent workers, against a live nsqd."""

from __future__ import annotations

import collections
import http.client
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gnsqlite.testing import NsqdServer, free_port, wait_until

pytest.importorskip("gunicorn")
pytest.importorskip("flask")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "gunicorn_flask"
TOPIC, CHANNEL = "events", "web"


def channel(server: NsqdServer) -> dict[str, Any]:
    for t in server.stats().get("topics", []):
        if t["topic_name"] == TOPIC:
            for c in t.get("channels", []):
                if c["channel_name"] == CHANNEL:
                    return dict(c)
    return {}


def request(port: int, method: str, path: str, body: bytes = b"") -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"}
                     if body.startswith(b"{") else {})
        response = conn.getresponse()
        data = response.read()
        assert response.status == 200, data
        return json.loads(data)
    finally:
        conn.close()


def answers(port: int) -> bool:
    try:
        request(port, "GET", "/stats")
    except OSError:
        return False
    return True


@pytest.fixture
def gunicorn(nsqd: NsqdServer, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    env = dict(
        os.environ,
        BIND=f"127.0.0.1:{port}",
        NSQD_TCP_ADDRESS=nsqd.tcp_address,
        RECORD_DIR=str(tmp_path),
        PYTHONPATH=str(ROOT),
    )
    log = open(tmp_path / "gunicorn.out", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", str(EXAMPLE / "gunicorn.conf.py"),
         "--chdir", str(EXAMPLE), "app:app"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        yield process, port
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()


def test_two_workers_consume_each_message_once_and_stop_cleanly(
    nsqd: NsqdServer, gunicorn: tuple[subprocess.Popen[bytes], int], tmp_path: Path
) -> None:
    process, port = gunicorn
    output = tmp_path / "gunicorn.out"
    wait_until(lambda: answers(port), timeout=30, message="gunicorn answers /stats")
    wait_until(lambda: len(channel(nsqd).get("clients", [])) == 2, timeout=20,
               message="both workers subscribed")

    expected = [b"single %d" % i for i in range(100)]
    for body in expected:
        assert request(port, "POST", "/publish", body)["published"] == 1
    for batch in range(10):
        messages = [f"batch {batch}-{i}" for i in range(10)]
        expected += [m.encode() for m in messages]
        body = json.dumps({"messages": messages}).encode()
        assert request(port, "POST", "/publish", body)["published"] == 10

    def consumed() -> collections.Counter[bytes]:
        counts: collections.Counter[bytes] = collections.Counter()
        for path in tmp_path.glob("*.log"):
            counts.update(line for line in path.read_bytes().split(b"\n") if line)
        return counts

    wait_until(lambda: sum(consumed().values()) >= len(expected), timeout=30)
    wait_until(lambda: channel(nsqd)["in_flight_count"] == 0, timeout=10)
    assert consumed() == collections.Counter(expected)  # each one exactly once
    per_worker = [p.read_bytes().count(b"\n") for p in tmp_path.glob("*.log")]
    assert len(per_worker) == 2 and all(per_worker), per_worker  # both workers consumed
    stats = request(port, "GET", "/stats")
    assert stats["consumer"]["topic"] == TOPIC and stats["handled"] >= 0

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0, output.read_text()
    final = channel(nsqd)
    assert final["in_flight_count"] == 0 and final["depth"] == 0, final
    assert final["clients"] == [], final
    assert consumed() == collections.Counter(expected)
    assert "Traceback" not in output.read_text()
