"""The server launchers and fixtures of gnsqlite.testing, end to end."""

from __future__ import annotations

import os
import stat
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from gnsqlite.errors import NSQError
from gnsqlite.http import HTTPError
from gnsqlite.testing import (
    LookupdServer,
    NsqdServer,
    ServerProcess,
    ServerStartError,
    WaitTimeout,
    free_port,
    wait_until,
)
from gnsqlite.testing.plugin import NsqCluster
from gnsqlite.testing.process import listens


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def fake_bin_dir(tmp_path: Path) -> Path:
    """``nsqd`` and ``nsqlookupd`` shell scripts that record their argv and exec ours."""
    for name, module in (("nsqd", "gnsqlite.broker"), ("nsqlookupd", "gnsqlite.broker.lookupd")):
        path = tmp_path / name
        path.write_text(
            "#!/bin/sh\n"
            f'printf "%s\\n" "$@" > "$(dirname "$0")/{name}.argv"\n'
            f'exec "{sys.executable}" -m {module} "$@"\n'
        )
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return tmp_path


def test_env_directory_binaries_are_launched_with_nsqd_flags(
    fake_bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GNSQLITE_NSQD", str(fake_bin_dir))
    with LookupdServer() as lookupd:
        assert lookupd.is_real
        with NsqdServer(lookupd=lookupd, msg_timeout=2.0, max_rdy_count=7) as nsqd:
            assert nsqd.is_real
            nsqd.http.pub("t", b"hello")
            wait_until(lambda: lookupd.http.producer_addresses("t") == [nsqd.tcp_address])
            nsqd_argv = (fake_bin_dir / "nsqd.argv").read_text().splitlines()
            assert nsqd_argv == [
                f"--https-address=127.0.0.1:{nsqd.https_port}",
                f"--tcp-address={nsqd.tcp_address}",
                f"--http-address={nsqd.http_address}",
                "--broadcast-address=127.0.0.1",
                f"--data-path={nsqd.data_path}",
                f"--lookupd-tcp-address={lookupd.tcp_address}",
                "--msg-timeout=2000ms",
                "--max-rdy-count=7",
            ]
        lookupd_argv = (fake_bin_dir / "nsqlookupd.argv").read_text().splitlines()
        assert lookupd_argv == [
            f"--tcp-address={lookupd.tcp_address}",
            f"--http-address={lookupd.http_address}",
            "--broadcast-address=127.0.0.1",
        ]


def test_nsqd_restart_keeps_ports_and_data(tmp_path: Path) -> None:
    with NsqdServer() as nsqd:
        addresses = (nsqd.tcp_address, nsqd.http_address)
        data_path = nsqd.data_path
        assert data_path is not None and os.path.isdir(data_path)
        nsqd.http.pub("kept", b"x")
        nsqd.restart()
        assert (nsqd.tcp_address, nsqd.http_address) == addresses
        [topic] = nsqd.stats(topic="kept")["topics"]
        assert topic["depth"] == 1
        assert nsqd.stop() == 0  # SIGTERM stops it cleanly
    assert not os.path.exists(data_path)  # close() removed the temporary data path


def test_start_failure_shows_the_process_stderr(tmp_path: Path) -> None:
    script = _script(
        tmp_path / "broken",
        """
        import sys
        sys.stderr.write("FATAL: no such flag --frobnicate\\n")
        sys.exit(2)
    """,
    )
    process = ServerProcess([str(script)], f"127.0.0.1:{free_port()}", "broken")
    process.launch()
    with pytest.raises(ServerStartError, match=r"(?s)exited with status 2.*no such flag"):
        process.wait_ready(timeout=10)
    assert not process.running and process.exit_status == 2


def test_a_ping_answered_by_another_process_on_the_port_is_not_ready(tmp_path: Path) -> None:
    import gevent.pywsgi

    def ok(environ: dict[str, object], start_response: Callable[..., object]) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"OK"]

    # The port taken after free_port() by another process (here: this one) that
    # answers /ping; the child never listens on it.
    other = gevent.pywsgi.WSGIServer(("127.0.0.1", 0), ok, log=None)
    other.start()
    try:
        port = other.server_port
        assert port is not None
        assert listens(os.getpid(), port) is True
        script = _script(tmp_path / "late", "import time\ntime.sleep(60)\n")
        process = ServerProcess([str(script)], f"127.0.0.1:{port}", "late")
        process.launch()
        assert process.pid is not None and listens(process.pid, port) is False
        with pytest.raises(ServerStartError, match="did not answer /ping"):
            process.wait_ready(timeout=0.5)
    finally:
        other.stop()


def test_start_times_out_when_ping_never_answers(tmp_path: Path) -> None:
    script = _script(
        tmp_path / "silent",
        """
        import sys, time
        print("starting", flush=True)
        time.sleep(60)
    """,
    )
    process = ServerProcess([str(script)], f"127.0.0.1:{free_port()}", "silent")
    process.launch()
    with pytest.raises(ServerStartError, match=r"(?s)did not answer /ping.*starting"):
        process.wait_ready(timeout=0.5)
    assert not process.running


def test_stop_kills_a_process_that_ignores_sigterm(tmp_path: Path) -> None:
    port = free_port()
    script = _script(
        tmp_path / "stubborn",
        f"""
        import signal
        from http.server import BaseHTTPRequestHandler, HTTPServer
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        class Ping(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"OK")
            def log_message(self, *args):
                pass
        HTTPServer(("127.0.0.1", {port}), Ping).serve_forever()
    """,
    )
    process = ServerProcess([str(script)], f"127.0.0.1:{port}", "stubborn")
    process.launch()
    process.wait_ready(timeout=10)
    assert process.stop(timeout=0.3) == -9
    assert not process.running and process.exit_status == -9
    process.close()


def test_nsqd_fixture_is_running(nsqd: NsqdServer) -> None:
    assert nsqd.http.ping()
    assert nsqd.stats()["topics"] == []
    assert nsqd.is_real == bool(os.environ.get("GNSQLITE_NSQD"))


def test_nsqd_factory_passes_options(nsqd_factory: Callable[..., NsqdServer]) -> None:
    server = nsqd_factory(max_msg_size=10)
    server.http.pub("t", b"0123456789")
    with pytest.raises(HTTPError) as exc_info:
        server.http.pub("t", b"0123456789+")
    assert exc_info.value.status == 413


def test_cluster_fixture_registers_three_nsqd(nsq_cluster: NsqCluster) -> None:
    assert len(nsq_cluster.nsqds) == 3
    for server in nsq_cluster.nsqds:
        server.http.create_topic("shared")
    lookup = nsq_cluster.lookupd.http
    wait_until(lambda: len(lookup.producer_addresses("shared")) == 3)
    assert sorted(lookup.producer_addresses("shared")) == sorted(
        s.tcp_address for s in nsq_cluster.nsqds
    )


def test_a_cluster_whose_nsqd_never_registers_says_what_lookupd_listed(
    nsqlookupd: LookupdServer,
) -> None:
    cluster = NsqCluster(nsqlookupd)
    with NsqdServer(lookupd=nsqlookupd) as registered, NsqdServer() as unregistered:
        cluster.nsqds = [registered, unregistered]
        with pytest.raises(WaitTimeout) as caught:
            cluster.wait_registered(timeout=1.0)
    text = str(caught.value)
    assert f"lookupd listed ['{registered.tcp_address}']" in text
    assert f"--- nsqd {unregistered.tcp_address}:" in text  # each process's log tail follows


def test_nsqlookupd_fixture(nsqlookupd: LookupdServer) -> None:
    assert nsqlookupd.http.ping()
    assert nsqlookupd.http.topics() == []


def test_stopped_server_refuses_connections() -> None:
    server = LookupdServer()
    server.start()
    client = server.http
    assert server.stop() == 0
    with pytest.raises(NSQError):
        client.ping()


def test_first_start_moves_off_a_port_taken_meanwhile() -> None:
    import gevent.socket

    with gevent.socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        server = NsqdServer()
        server.tcp_port = taken  # as if another process took the port we picked
        with server:
            assert server.tcp_port != taken
            assert server.http.ping()
            server.stop()
            server.tcp_port = taken  # a restart keeps its ports: no silent move
            with pytest.raises(ServerStartError, match=r"(?i)address already in use"):
                server.start()


def test_a_missing_binary_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GNSQLITE_NSQD", str(tmp_path))
    server = NsqdServer()
    with pytest.raises(ServerStartError, match="cannot run nsqd"):
        server.start()
    server.close()


def test_tls_required_nsqd_counts_as_ready(tmp_path: Path) -> None:
    port = free_port()
    script = _script(
        tmp_path / "tls_only",
        f"""
        from http.server import BaseHTTPRequestHandler, HTTPServer
        class TLSOnly(BaseHTTPRequestHandler):
            def do_GET(self):  # what nsqd --tls-required=true answers over plain HTTP
                self.send_response(403)
                self.end_headers()
                self.wfile.write(b'{{"message": "TLS_REQUIRED", "https_port": 4152}}')
            def log_message(self, *args):
                pass
        HTTPServer(("127.0.0.1", {port}), TLSOnly).serve_forever()
    """,
    )
    process = ServerProcess([str(script)], f"127.0.0.1:{port}", "tls_only")
    process.launch()
    try:
        process.wait_ready(timeout=10)
        assert process.running
    finally:
        process.close()


def test_lookupd_restart_keeps_its_addresses(nsqlookupd: LookupdServer) -> None:
    addresses = (nsqlookupd.tcp_address, nsqlookupd.http_address)
    nsqlookupd.restart()
    assert (nsqlookupd.tcp_address, nsqlookupd.http_address) == addresses
    assert nsqlookupd.http.ping()
