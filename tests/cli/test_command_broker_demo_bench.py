"""``gnsqlite broker``, ``gnsqlite demo`` and ``gnsqlite bench``: run, observe, Ctrl-C."""

from __future__ import annotations

import importlib.util
import json
import re
from typing import Any

import pytest
from cli_helpers import assert_one_line_error, gnsqlite, interrupt, read_until, start

from gnsqlite.http import LookupdClient, NsqdHTTPClient
from gnsqlite.http_transport import http_request
from gnsqlite.testing import free_port, wait_until


def test_broker_with_lookupd_registers_and_stops_on_ctrl_c() -> None:
    ports = [free_port("127.0.0.1") for _ in range(4)]
    tcp, http, ltcp, lhttp = (f"127.0.0.1:{p}" for p in ports)
    proc = start(
        [
            "broker",
            "--tcp-address",
            tcp,
            "-http-address",
            http,
            "--lookupd",
            "--lookupd-listen-tcp",
            ltcp,
            "--lookupd-listen-http",
            lhttp,
        ]
    )
    try:
        read_until(proc, "Ctrl-C stops")
        NsqdHTTPClient(http).pub("hello", b"x")
        lookupd = LookupdClient(lhttp)
        wait_until(lambda: [n["tcp_port"] for n in lookupd.nodes()] == [ports[0]], timeout=10)
        wait_until(lambda: len(lookupd.producer_addresses("hello")) == 1, timeout=10)
    finally:
        result = interrupt(proc)
    assert result.returncode == 0, result
    assert "Traceback" not in result.stderr


def test_broker_on_a_taken_port_fails_in_one_line(nsqd: Any) -> None:
    result = gnsqlite(
        [
            "broker",
            "--tcp-address",
            nsqd.tcp_address,
            "--http-address",
            f"127.0.0.1:{free_port('127.0.0.1')}",
        ]
    )
    assert result.returncode == 1
    assert "cannot listen" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.skipif(
    importlib.util.find_spec("geventwebsocket") is None,
    reason="the dashboard extra (gevent-websocket) is not installed",
)
def test_demo_runs_traffic_and_the_dashboard_then_stops_on_ctrl_c() -> None:
    proc = start(["demo", "--port", "0", "--rate", "100", "--nsqd", "2"])
    try:
        banner = read_until(proc, "Ctrl-C stops")
        match = re.search(r"dashboard: http://([\d.]+:\d+)/", banner)
        assert match, banner
        address = match.group(1)

        def received() -> int:
            snapshot = json.loads(http_request(address, "GET", "/api/snapshot"))["snapshot"]
            consumer = next(s for s in snapshot["sources"] if s["kind"] == "consumer")
            assert len(consumer["connections"]) <= 2
            return int(consumer["totals"]["received"])

        wait_until(lambda: received() > 20, timeout=20, message="demo messages consumed")
        page = http_request(address, "GET", "/").decode()
        assert "<title>gnsqlite dashboard</title>" in page
    finally:
        result = interrupt(proc)
    assert result.returncode == 0, result
    assert "stopped; published" in result.stdout
    assert "Traceback" not in result.stderr


def test_bench_publish_and_consume_against_a_given_nsqd(nsqd: Any) -> None:
    result = gnsqlite(
        [
            "bench",
            "--nsqd-tcp-address",
            nsqd.tcp_address,
            "--messages",
            "500",
            "--max-in-flight",
            "50",
        ],
        timeout=60,
    )
    assert result.returncode == 0, result
    rows = {line.split("  ")[0].strip(): line for line in result.stdout.splitlines()}
    for name in ("sequential PUB", "pipelined PUB x50", "MPUB batches of 100", "max_in_flight=50"):
        rate = float(rows[name].split()[-1].replace(",", ""))
        assert rate > 0


def test_bench_errors_are_one_line() -> None:
    port = free_port("127.0.0.1")
    result = gnsqlite(["bench", "--nsqd-tcp-address", f"127.0.0.1:{port}"])
    assert_one_line_error(result, 1, f"cannot reach nsqd at 127.0.0.1:{port}")
    assert_one_line_error(gnsqlite(["bench", "--max-in-flight", "x"]), 2, "--max-in-flight")


@pytest.mark.skipif(
    importlib.util.find_spec("geventwebsocket") is None,
    reason="the dashboard extra (gevent-websocket) is not installed",
)
def test_dashboard_watches_a_cluster_through_lookupd(nsqlookupd: Any, nsqd_factory: Any) -> None:
    nsqd = nsqd_factory(lookupd=nsqlookupd)
    nsqd.http.mpub("watched", [b"a", b"b"])
    wait_until(lambda: "watched" in nsqlookupd.http.topics(), timeout=10)
    proc = start(
        [
            "dashboard",
            "--lookupd-http-address",
            nsqlookupd.http_address,
            "--port",
            "0",
            "--interval",
            "0.2",
        ]
    )
    try:
        match = re.search(r"dashboard: http://([\d.]+:\d+)/", read_until(proc, "Ctrl-C stops"))
        assert match
        address = match.group(1)

        def depth() -> int:
            snapshot = json.loads(http_request(address, "GET", "/api/snapshot"))["snapshot"]
            topics = snapshot["sources"][0]["topics"]
            return sum(t["depth"] for t in topics if t["topic"] == "watched")

        wait_until(lambda: depth() == 2, timeout=10, message="the cluster's depth shown")
    finally:
        result = interrupt(proc)
    assert result.returncode == 0, result
    assert "Traceback" not in result.stderr
    port = free_port("127.0.0.1")
    result = gnsqlite(["dashboard", "--nsqd-http-address", f"127.0.0.1:{port}"])
    assert_one_line_error(result, 1, f"cannot reach nsqd at 127.0.0.1:{port}")
