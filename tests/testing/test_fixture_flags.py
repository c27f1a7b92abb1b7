"""The command lines the test servers run (gnsqlite.testing.flags)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gnsqlite.errors import ConfigError
from gnsqlite.testing import LookupdServer, NsqdServer, go_duration, nsqd_argv, nsqd_flags
from gnsqlite.testing.flags import lookupd_argv


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (2.0, "2000ms"),
        (0.5, "500ms"),
        (60, "60000ms"),
        (0, "0ms"),
        (0.0015, "1500us"),
        ("1m0s", "1m0s"),
    ],
)
def test_go_duration(seconds: float | str, text: str) -> None:
    assert go_duration(seconds) == text


@pytest.mark.parametrize("bad", [-1.0, float("inf"), float("nan"), True])
def test_go_duration_rejects(bad: float) -> None:
    with pytest.raises(ConfigError):
        go_duration(bad)


def test_flags_use_go_syntax() -> None:
    lookupd = LookupdServer(bin_dir="")
    lookupd.tcp_port = 4160
    assert nsqd_flags(
        {
            "msg_timeout": 2.0,
            "max_rdy_count": 10,
            "snappy": True,
            "deflate": False,
            "tls_cert": Path("/certs/server.pem"),
            "tls_required": "tcp-https",
            "auth_http_address": "127.0.0.1:4181",
            "lookupd": [lookupd, "10.0.0.1:4160"],
            "max_heartbeat_interval": 1.5,
            "data_path_unused": None,
        }
    ) == [
        "--msg-timeout=2000ms",
        "--max-rdy-count=10",
        "--snappy=true",
        "--deflate=false",
        "--tls-cert=/certs/server.pem",
        "--tls-required=tcp-https",
        "--auth-http-address=127.0.0.1:4181",
        "--lookupd-tcp-address=127.0.0.1:4160",
        "--lookupd-tcp-address=10.0.0.1:4160",
        "--max-heartbeat-interval=1500ms",
    ]


def test_unknown_options_are_refused_when_the_server_is_built() -> None:
    with pytest.raises(ConfigError, match="'msg_timout' is not an nsqd option"):
        NsqdServer(msg_timout=1.0)
    with pytest.raises(ConfigError, match="max_rdy_count"):
        NsqdServer(max_rdy_count=[1, 2])


def test_embedded_nsqd_argv() -> None:
    assert nsqd_argv(
        tcp_address="127.0.0.1:1",
        http_address="127.0.0.1:2",
        data_path="/tmp/d",
        options={"msg_timeout": 1.0},
    ) == [
        sys.executable,
        "-m",
        "gnsqlite.broker",
        "--tcp-address=127.0.0.1:1",
        "--http-address=127.0.0.1:2",
        "--broadcast-address=127.0.0.1",
        "--data-path=/tmp/d",
        "--msg-timeout=1000ms",
    ]


def test_real_nsqd_argv_moves_https_off_its_default_port() -> None:
    assert nsqd_argv(
        tcp_address="127.0.0.1:1",
        http_address="127.0.0.1:2",
        data_path="/tmp/d",
        options={"lookupd_tcp_addresses": ["127.0.0.1:3"], "tls_cert": "c", "tls_key": "k"},
        bin_dir="/opt/nsq/bin",
        https_address="127.0.0.1:4",
    ) == [
        "/opt/nsq/bin/nsqd",
        "--https-address=127.0.0.1:4",
        "--tcp-address=127.0.0.1:1",
        "--http-address=127.0.0.1:2",
        "--broadcast-address=127.0.0.1",
        "--data-path=/tmp/d",
        "--lookupd-tcp-address=127.0.0.1:3",
        "--tls-cert=c",
        "--tls-key=k",
    ]
    with pytest.raises(ConfigError, match="https_address"):
        nsqd_argv(tcp_address="a:1", http_address="a:2", data_path="/d", bin_dir="/x")


def test_lookupd_argv() -> None:
    assert lookupd_argv(tcp_address="127.0.0.1:1", http_address="127.0.0.1:2") == [
        sys.executable,
        "-m",
        "gnsqlite.broker.lookupd",
        "--tcp-address=127.0.0.1:1",
        "--http-address=127.0.0.1:2",
        "--broadcast-address=127.0.0.1",
    ]
    assert (
        lookupd_argv(tcp_address="127.0.0.1:1", http_address="127.0.0.1:2", bin_dir="/opt/nsq/bin")[
            0
        ]
        == "/opt/nsq/bin/nsqlookupd"
    )


def test_server_argv_uses_the_env_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GNSQLITE_NSQD", "/opt/nsq/bin")
    server = NsqdServer(data_path="/tmp/data", snappy=True)
    argv = server.argv()
    assert server.is_real
    assert argv[0] == "/opt/nsq/bin/nsqd"
    assert f"--tcp-address={server.tcp_address}" in argv
    assert f"--http-address={server.http_address}" in argv
    assert f"--https-address=127.0.0.1:{server.https_port}" in argv
    assert len({server.tcp_port, server.http_port, server.https_port}) == 3
    assert argv[-2:] == ["--data-path=/tmp/data", "--snappy=true"]
    assert server.argv() == argv  # ports are kept for restarts
    assert not NsqdServer(bin_dir="").is_real
    monkeypatch.delenv("GNSQLITE_NSQD")
    assert not NsqdServer().is_real
