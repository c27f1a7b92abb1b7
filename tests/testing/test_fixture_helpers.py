"""AuthServer, TLS files and wait_until from gnsqlite.testing."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gevent
import gevent.server
import gevent.socket
import gevent.ssl
import pytest

from gnsqlite.testing import (
    AuthServer,
    NsqdServer,
    TLSFiles,
    WaitTimeout,
    grant,
    make_tls_files,
    wait_until,
)


def _get(url: str) -> tuple[int, Any]:
    """A blocking stdlib request: it blocks this thread's hub entirely."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_auth_server_answers_from_its_policy_while_the_caller_blocks() -> None:
    def policy(remote_ip: str, tls: bool, secret: str) -> dict[str, Any] | None:
        return grant(identity=f"{secret}@{remote_ip}", topic="^t$") if secret == "ok" else None

    with AuthServer(policy) as server:
        status, body = _get(f"http://{server.address}/auth?remote_ip=1.2.3.4&tls=true&secret=ok")
        assert status == 200
        assert body == {
            "ttl": 3600,
            "identity": "ok@1.2.3.4",
            "identity_url": "",
            "authorizations": [
                {"topic": "^t$", "channels": [".*"], "permissions": ["subscribe", "publish"]}
            ],
        }
        assert _get(f"http://{server.address}/auth?remote_ip=1.2.3.4&tls=false&secret=no") == (
            403,
            {"message": "NOT_AUTHORIZED"},
        )
        assert server.requests == [
            {"remote_ip": "1.2.3.4", "tls": "true", "secret": "ok"},
            {"remote_ip": "1.2.3.4", "tls": "false", "secret": "no"},
        ]
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://{server.address}/auth", timeout=2)


def test_auth_server_fixture(auth_server_factory: Callable[..., AuthServer]) -> None:
    seen: list[bool] = []

    def policy(remote_ip: str, tls: bool, secret: str) -> dict[str, Any]:
        seen.append(tls)
        return grant()

    server = auth_server_factory(policy)
    assert _get(f"http://{server.address}/auth?tls=true")[0] == 200
    assert seen == [True]


def test_tls_files_serve_a_verifiable_certificate(tls_files: TLSFiles) -> None:
    for path in (tls_files.ca_file, tls_files.cert_file, tls_files.key_file):
        assert Path(path).read_bytes().startswith(b"-----BEGIN")
    server_context = gevent.ssl.SSLContext(gevent.ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(tls_files.cert_file, tls_files.key_file)

    def handle(sock: gevent.socket.socket, _address: Any) -> None:
        with server_context.wrap_socket(sock, server_side=True) as tls:
            tls.sendall(b"hello")

    server = gevent.server.StreamServer(("127.0.0.1", 0), handle)
    server.start()
    port = server.server_port
    assert port is not None  # a started server has its port
    try:
        for hostname in ("127.0.0.1", "localhost"):
            raw = gevent.socket.create_connection(("127.0.0.1", port), timeout=5)
            context = tls_files.client_context()
            with context.wrap_socket(raw, server_hostname=hostname) as tls:
                assert tls.recv(5) == b"hello"
        raw = gevent.socket.create_connection(("127.0.0.1", port), timeout=5)
        with pytest.raises(ssl.SSLCertVerificationError):
            context = gevent.ssl.SSLContext(gevent.ssl.PROTOCOL_TLS_CLIENT)
            context.load_default_certs()
            context.wrap_socket(raw, server_hostname="localhost")
        raw.close()
    finally:
        server.stop(timeout=1)


def test_make_tls_files_writes_fresh_files(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path)
    assert Path(files.client_cert_file).exists()
    assert Path(files.ca_file).read_bytes() != Path(files.cert_file).read_bytes()


def test_wait_until_returns_the_truthy_value() -> None:
    calls = iter([0, None, "", "done"])
    assert wait_until(lambda: next(calls), timeout=2, interval=0.001) == "done"


def test_wait_until_lets_other_greenlets_run() -> None:
    flag: list[int] = []
    gevent.spawn_later(0.05, flag.append, 1)
    assert wait_until(lambda: flag, timeout=2) == [1]


def test_wait_until_times_out_with_the_last_value() -> None:
    with pytest.raises(WaitTimeout, match=r"never: not true after 0.05 s \(last: 0\)"):
        wait_until(lambda: 0, timeout=0.05, message="never")


def test_wait_until_ignores_only_the_given_errors() -> None:
    attempts: Iterator[OSError | int] = iter([OSError("not yet"), OSError("still not"), 42])

    def probe() -> int:
        item = next(attempts)
        if isinstance(item, Exception):
            raise item
        return item

    assert wait_until(probe, timeout=2, interval=0.001, ignore=(OSError,)) == 42
    with pytest.raises(ZeroDivisionError):
        wait_until(lambda: 1 // 0, timeout=2, ignore=(OSError,))
    with pytest.raises(AssertionError, match="OSError"):
        wait_until(lambda: (_ for _ in ()).throw(OSError("x")), timeout=0.05, ignore=(OSError,))


def test_auth_server_works_in_a_monkey_patched_process() -> None:
    import subprocess
    import sys

    code = """
from gevent import monkey; monkey.patch_all()
import urllib.request
from gnsqlite.testing import AuthServer, grant
with AuthServer(lambda ip, tls, secret: grant(identity=secret)) as server:
    print(urllib.request.urlopen(f"http://{server.address}/auth?secret=zed").read().decode())
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    )
    assert json.loads(out.stdout)["identity"] == "zed"


def test_stats_helpers_find_one_topic_and_channel(nsqd: NsqdServer) -> None:
    assert nsqd.topic_stats("helpers") == {}
    assert nsqd.channel_stats("helpers", "c") == {}
    assert not nsqd.channel_drained("helpers", "c")  # absent is not drained
    nsqd.http.create_topic("helpers")
    nsqd.http.create_channel("helpers", "c")
    assert nsqd.channel_drained("helpers", "c")
    nsqd.http.pub("helpers", b"x")
    assert nsqd.topic_stats("helpers")["message_count"] == 1
    assert nsqd.channel_stats("helpers", "c")["depth"] == 1
    assert not nsqd.channel_drained("helpers", "c")
