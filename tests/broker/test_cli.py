"""``python -m gnsqlite.broker``: nsqd's flags, clean stop on SIGTERM/SIGINT."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from gnsqlite.broker import parse_duration
from gnsqlite.broker.__main__ import options_from_args
from gnsqlite.errors import ConfigError

pytestmark = pytest.mark.embedded_only


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("60s", 60.0),
        ("1m0s", 60.0),
        ("500ms", 0.5),
        ("2h", 7200.0),
        ("1.5s", 1.5),
        ("0", 0.0),
        ("1h2m3s", 3723.0),
        ("250us", 0.00025),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "s", "1x", "1m x"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_flags_in_every_form() -> None:
    options = options_from_args(
        [
            "--tcp-address=127.0.0.1:0",
            "-http-address",
            "127.0.0.1:0",
            "--msg-timeout",
            "2s",
            "-max-msg-timeout=1m0s",
            "--max-req-timeout=500ms",
            "--lookupd-tcp-address=127.0.0.1:4160",
            "--lookupd-tcp-address",
            "127.0.0.1:4161",
            "--snappy=false",
            "--deflate",
            "--tls-required=false",
            "--max-rdy-count=10",
            "--max-channel-consumers=3",
            "--log-level=debug",
        ]
    )
    assert options == {
        "tcp_address": "127.0.0.1:0",
        "http_address": "127.0.0.1:0",
        "msg_timeout": 2.0,
        "max_msg_timeout": 60.0,
        "max_req_timeout": 0.5,
        "lookupd_tcp_addresses": ["127.0.0.1:4160", "127.0.0.1:4161"],
        "snappy": False,
        "deflate": True,
        "tls_required": False,
        "max_rdy_count": 10,
        "max_channel_consumers": 3,
    }


def test_bad_flag_exits() -> None:
    with pytest.raises(SystemExit):
        options_from_args(["--msg-timeout=soon"])


def test_options_are_validated() -> None:
    from gnsqlite.broker import Broker

    with pytest.raises(ConfigError, match="msg_timeout"):
        Broker(msg_timeout=10.0, max_msg_timeout=5.0)
    with pytest.raises(ConfigError, match="tcp_address"):
        Broker(tcp_address="nowhere")
    with pytest.raises(ConfigError, match="max_channel_consumers"):
        Broker(max_channel_consumers=-1)


def _start(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gnsqlite.broker", *args],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        match = re.search(r"HTTP: listening on (\S+)", line)
        if match:
            return proc, match.group(1)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("the broker did not start")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cli_serves_and_stops_cleanly_with_persistence(tmp_path: Path, sig: int) -> None:
    proc, http_address = _start(
        ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", f"--data-path={tmp_path}"]
    )
    try:
        with urllib.request.urlopen(f"http://{http_address}/ping", timeout=5) as r:
            assert r.read() == b"OK"
        req = urllib.request.Request(f"http://{http_address}/pub?topic=t", data=b"kept")
        with urllib.request.urlopen(req, timeout=5) as r:
            assert r.read() == b"OK"
    finally:
        proc.send_signal(sig)
        assert proc.wait(timeout=10) == 0
        assert proc.stderr is not None
        proc.stderr.close()
    state = json.loads((tmp_path / "gnsqlite-nsqd.json").read_text())
    assert [t["name"] for t in state["topics"]] == ["t"]

    proc, http_address = _start(
        ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", f"--data-path={tmp_path}"]
    )
    try:
        with urllib.request.urlopen(f"http://{http_address}/stats?format=json", timeout=5) as r:
            stats = json.loads(r.read())
        assert stats["topics"][0]["depth"] == 1
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
        assert proc.stderr is not None
        proc.stderr.close()


def test_cli_bind_failure_exits_non_zero() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "gnsqlite.broker",
                f"--tcp-address=127.0.0.1:{port}",
                "--http-address=127.0.0.1:0",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        )
    assert proc.returncode != 0
    assert "failed to start" in proc.stderr


def test_tls_flags() -> None:
    options = options_from_args(
        [
            "--tls-cert=c.pem",
            "--tls-key=k.pem",
            "--tls-root-ca-file=ca.pem",
            "--tls-client-auth-policy=require-verify",
            "--tls-min-version=TLS1.2",
            "--https-address=127.0.0.1:0",
            "--http-client-connect-timeout=1s",
        ]
    )
    assert options == {
        "tls_cert": "c.pem",
        "tls_key": "k.pem",
        "tls_root_ca_file": "ca.pem",
        "tls_client_auth_policy": "require-verify",
        "tls_min_version": "TLS1.2",
        "https_address": "127.0.0.1:0",
        "http_client_connect_timeout": 1.0,
    }


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--statsd-address=127.0.0.1:8125", "sends no statsd"),
        ("--e2e-processing-latency-percentile=0.99", "latency percentiles"),
        ("--config=nsqd.cfg", "reads no config file"),
        ("--node-id=1024", r"\[0,1024\)"),
    ],
)
def test_flags_the_broker_cannot_honour_are_refused(
    flag: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        options_from_args([flag])
    assert exc.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_flags_without_an_observable_effect_are_accepted() -> None:
    options = options_from_args(
        [
            "--statsd-address=",
            "--statsd-prefix=nsq.%s",
            "--statsd-interval=60s",
            "--mem-queue-size=1000000",
            "--max-bytes-per-file=1024",
            "--sync-every=10",
            "--sync-timeout=2s",
            "--e2e-processing-latency-window-time=10m",
            "--node-id=7",
            "--log-prefix=[x] ",
            "--verbose",
            "-verbose=true",
        ]
    )
    assert options == {}


def test_tls_options_are_validated(tmp_path: Path) -> None:
    from gnsqlite.broker.options import BrokerOptions

    with pytest.raises(ConfigError, match=r"'require' .*'require-verify'"):
        BrokerOptions(tls_cert="c", tls_key="k", tls_client_auth_policy="required")
    with pytest.raises(ConfigError, match="needs tls_cert and tls_key"):
        BrokerOptions(tls_client_auth_policy="require")
    with pytest.raises(ConfigError, match=r"refuses SSL 3\.0"):
        BrokerOptions(tls_min_version="ssl3.0")
    with pytest.raises(ConfigError, match=re.escape("'tls1.0', 'tls1.1', 'tls1.2' or 'tls1.3'")):
        BrokerOptions(tls_min_version="tls1.4")
    with pytest.raises(ConfigError, match="https_address"):
        BrokerOptions(https_address="nowhere")
    with pytest.raises(ConfigError, match="over plain HTTP only"):  # never queried as http
        BrokerOptions(auth_http_addresses=["https://127.0.0.1:1"])
    assert BrokerOptions(auth_http_addresses=["http://127.0.0.1:1"]).auth_http_addresses
    with pytest.raises(ConfigError, match="http_client_connect_timeout"):
        BrokerOptions(http_client_connect_timeout=0)
    # as nsqd: a policy makes TLS required; "" is unset; versions are case-insensitive
    opts = BrokerOptions(tls_cert="c", tls_key="k", tls_client_auth_policy="require")
    assert opts.tls_required is True
    opts = BrokerOptions(tls_client_auth_policy="", tls_min_version="TLS1.3")
    assert (opts.tls_client_auth_policy, opts.tls_required, opts.tls_min_version) == (
        None,
        False,
        "tls1.3",
    )
    assert BrokerOptions(tls_min_version="").tls_min_version == "tls1.0"
    # --tls-required: a boolean, or tcp-https (TCP only), which a policy keeps
    assert options_from_args(["--tls-required=tcp-https"])["tls_required"] == "tcp-https"
    assert options_from_args(["--tls-required"])["tls_required"] is True
    opts = BrokerOptions(
        tls_cert="c", tls_key="k", tls_client_auth_policy="require", tls_required="TCP-HTTPS"
    )
    assert opts.tls_required == "tcp-https"
    with pytest.raises(ConfigError, match="'tcp-https' \\(TCP only\\) or False"):
        BrokerOptions(tls_cert="c", tls_key="k", tls_required="https")


def test_cli_refuses_a_bad_option_with_status_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gnsqlite.broker",
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            "--tls-client-auth-policy=require",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "needs tls_cert and tls_key" in proc.stderr
