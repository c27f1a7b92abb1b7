"""``gnsqlite tail`` against a running nsqd (directly and through lookupd)."""

from __future__ import annotations

import json
from typing import Any

from cli_helpers import assert_one_line_error, gnsqlite, interrupt, start

from gnsqlite.testing import free_port, wait_until


def _subscribed(nsqd: Any, topic: str) -> bool:
    for t in nsqd.stats(topic=topic).get("topics", []):
        if any(c["client_count"] or c["clients"] for c in t["channels"]):
            return True
    return False


def test_tail_prints_n_messages_as_json_then_exits(nsqd: Any) -> None:
    proc = start(
        [
            "tail",
            "--topic",
            "clicks",
            "--nsqd-tcp-address",
            nsqd.tcp_address,
            "-n",
            "3",
            "--format",
            "json",
        ]
    )
    try:
        nsqd.http.create_topic("clicks")
        wait_until(lambda: _subscribed(nsqd, "clicks"), timeout=15, message="tail subscribed")
        nsqd.http.mpub("clicks", [b"one", b"<b>deux</b>", b"\xff\xfe", b"four"])
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    records = [json.loads(line) for line in out.decode().splitlines()]
    assert [r.get("body") for r in records] == ["one", "<b>deux</b>", None]
    assert records[2]["body_base64"] == "//4="
    assert all(r["attempts"] == 1 and len(r["id"]) == 16 for r in records)
    # the channel was ephemeral: it is gone with the tail
    wait_until(lambda: not nsqd.stats(topic="clicks")["topics"][0]["channels"], timeout=10)


def test_tail_through_lookupd_stops_cleanly_on_ctrl_c(nsqlookupd: Any, nsqd_factory: Any) -> None:
    nsqd = nsqd_factory(lookupd=nsqlookupd)
    nsqd.http.create_topic("logs")
    wait_until(lambda: "logs" in nsqlookupd.http.topics(), timeout=10)
    proc = start(
        [
            "tail",
            "--topic",
            "logs",
            "--channel",
            "tailer",
            "--lookupd-http-address",
            nsqlookupd.http_address,
        ]
    )
    try:
        wait_until(lambda: _subscribed(nsqd, "logs"), timeout=15, message="tail subscribed")
        nsqd.http.pub("logs", b"hello from lookupd")
        wait_until(
            lambda: (
                nsqd.stats(topic="logs")["topics"][0]["channels"][0]["depth"] == 0
                and nsqd.stats(topic="logs")["topics"][0]["channels"][0]["in_flight_count"] == 0
            ),
            timeout=10,
        )
    finally:
        result = interrupt(proc)
    assert result.returncode == 0, result
    assert result.stdout == "hello from lookupd\n"
    assert "Traceback" not in result.stderr


def test_tail_errors_are_one_line() -> None:
    port = free_port("127.0.0.1")
    result = gnsqlite(["tail", "--topic", "t", "--nsqd-tcp-address", f"127.0.0.1:{port}"])
    assert_one_line_error(result, 1, f"cannot reach nsqd at 127.0.0.1:{port}")
    result = gnsqlite(["tail", "--topic", "t", "--lookupd-http-address", f"127.0.0.1:{port}"])
    assert_one_line_error(result, 1, f"cannot reach nsqlookupd at 127.0.0.1:{port}")
    result = gnsqlite(["tail", "--topic", "no good", "--nsqd-tcp-address", "127.0.0.1:4150"])
    assert_one_line_error(result, 2, "no good")
    result = gnsqlite(["tail", "--topic", "t", "--channel", "b@d", "--nsqd-tcp-address", "x:1"])
    assert_one_line_error(result, 2, "b@d")
    result = gnsqlite(["tail", "--topic", "t", "--nsqd-tcp-address", "host-without-port"])
    assert_one_line_error(result, 2, "host-without-port")
