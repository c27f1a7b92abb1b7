"""The dashboard's server without a browser: what it serves, what it refuses, its lifecycle."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import gevent
import gevent.socket
import pytest

from gnsqlite.consumer import Consumer
from gnsqlite.errors import ConfigError

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("geventwebsocket") is None,
    reason="the dashboard extra (gevent-websocket) is not installed",
)


def _get(
    address: tuple[str, int], path: str, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """A raw HTTP/1.0 request over a gevent socket; returns (status, body)."""
    host, port = address
    lines = [f"{method} {path} HTTP/1.0", f"Host: {host}:{port}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    sock = gevent.socket.create_connection(address, timeout=5)
    try:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    finally:
        sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_it_serves_the_page_and_a_snapshot_of_a_cluster(nsqd: Any) -> None:
    from gnsqlite.dashboard import Dashboard

    nsqd.http.mpub("orders", [b"a", b"b"])
    dashboard = Dashboard(nsqd_http_addresses=[nsqd.http_address], interval=0.2)
    assert dashboard.url == ""  # the constructor opens nothing
    dashboard.start(("127.0.0.1", 0))
    try:
        address = dashboard.address
        assert address is not None and dashboard.url == f"http://127.0.0.1:{address[1]}/"
        status, page = _get(address, "/")
        assert status == 200 and b"<canvas" in page and b"https://" not in page  # no CDN
        for asset in ("/app.js", "/style.css"):
            status, body = _get(address, asset)
            assert status == 200 and b"http://" not in body and b"https://" not in body
        status, body = _get(address, "/api/snapshot")
        cluster = json.loads(body)["snapshot"]["sources"][0]
        assert cluster["kind"] == "cluster"
        assert cluster["topics"][0]["topic"] == "orders"
        assert cluster["topics"][0]["depth"] == 2
    finally:
        dashboard.stop()
    assert dashboard.url == ""
    with pytest.raises(OSError):
        _get(address, "/")


def test_it_is_read_only_and_refuses_other_hosts_and_origins(nsqd: Any) -> None:
    from gnsqlite.dashboard import Dashboard

    consumer = Consumer("t", "c", lambda m: None, nsqd_tcp_addresses=[nsqd.tcp_address])
    with Dashboard(consumer) as dashboard:
        address = dashboard.address
        assert address is not None
        assert _get(address, "/api/snapshot", method="POST")[0] == 405
        assert _get(address, "/api/snapshot", headers={"Host": "evil.example:80"})[0] == 403
        origin = {"Origin": "http://evil.example"}
        assert _get(address, "/ws", headers=origin)[0] == 403
        same = {"Origin": f"http://127.0.0.1:{address[1]}"}
        assert _get(address, "/api/snapshot", headers=same)[0] == 200
        assert _get(address, "/ws")[0] == 400  # not a websocket upgrade
        assert _get(address, "/nope")[0] == 404


def test_bad_arguments_raise_config_errors() -> None:
    from gnsqlite.dashboard import Dashboard

    with pytest.raises(ConfigError, match="nothing to watch"):
        Dashboard()
    with pytest.raises(ConfigError, match="interval"):
        Dashboard(nsqd_http_addresses=["127.0.0.1:4151"], interval=0)
    with pytest.raises(ConfigError):
        Dashboard(nsqd_http_addresses=["no-port"])
    with pytest.raises(TypeError, match="cannot watch"):
        Dashboard(object())


def test_stop_leaves_no_greenlet_running(nsqd: Any) -> None:
    from gnsqlite.dashboard import Dashboard

    dashboard = Dashboard(nsqd_http_addresses=[nsqd.http_address], interval=0.05)
    dashboard.start(("127.0.0.1", 0))
    gevent.sleep(0.2)
    sampler = dashboard._sampler
    dashboard.stop()
    assert sampler is not None and sampler.dead
    assert len(dashboard._pool) == 0


def test_the_dashboard_example_runs_and_stops_on_ctrl_c(nsqd: Any) -> None:
    import re
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from gnsqlite.http_transport import http_request
    from gnsqlite.testing import wait_until

    example = Path(__file__).resolve().parents[2] / "examples" / "dashboard_consumer.py"
    nsqd.http.mpub("numbers", [b"%d" % i for i in range(100)])
    proc = subprocess.Popen(
        [
            sys.executable,
            str(example),
            "--topic",
            "numbers",
            "--nsqd-tcp-address",
            nsqd.tcp_address,
            "--port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        match = re.search(r"http://([\d.]+:\d+)/", line)
        assert match, line

        def finished() -> int:
            snapshot = json.loads(http_request(match.group(1), "GET", "/api/snapshot"))
            return int(snapshot["snapshot"]["sources"][0]["totals"]["finished"])

        wait_until(lambda: finished() == 100, timeout=15, message="100 messages finished")
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
