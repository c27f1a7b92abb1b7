"""``gnsqlite pub`` and ``gnsqlite stats`` against a running nsqd."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cli_helpers import assert_one_line_error, gnsqlite

from gnsqlite.testing import free_port, wait_until


def _topic(nsqd: Any, name: str) -> dict[str, Any] | None:
    for topic in nsqd.stats().get("topics", []):
        if topic["topic_name"] == name:
            return dict(topic)
    return None


def test_pub_publishes_every_line_of_a_file_in_batches(nsqd: Any, tmp_path: Path) -> None:
    path = tmp_path / "events.txt"
    path.write_text("".join(f"event {i}\n" for i in range(250)) + "\n")  # a blank line is skipped
    result = gnsqlite(
        [
            "pub",
            "--topic",
            "events",
            "--nsqd-tcp-address",
            nsqd.tcp_address,
            "--batch",
            "100",
            str(path),
        ]
    )
    assert result.returncode == 0, result
    assert "published 250 messages to 'events' in 3 MPUB batches" in result.stdout
    topic = _topic(nsqd, "events")
    assert topic is not None and topic["message_count"] == 250


def test_pub_reads_stdin_with_a_delimiter(nsqd: Any) -> None:
    result = gnsqlite(
        ["pub", "--topic", "files", "--nsqd-tcp-address", nsqd.tcp_address, "--delimiter", "\\0"],
        input=b"a\0b\nc\0d",
    )
    assert result.returncode == 0, result
    topic = _topic(nsqd, "files")
    assert topic is not None and topic["message_count"] == 3  # "a", "b\nc", "d"


def test_pub_with_an_empty_file_publishes_nothing_and_says_so(nsqd: Any, tmp_path: Path) -> None:
    path = tmp_path / "empty.txt"
    path.write_bytes(b"")
    args = ["pub", "--topic", "empty", "--nsqd-tcp-address", nsqd.tcp_address, str(path)]
    result = gnsqlite(args)
    assert result.returncode == 0, result
    assert "nothing to publish" in result.stderr
    assert "published 0 messages" in result.stdout
    assert _topic(nsqd, "empty") is None


def test_pub_rejects_an_invalid_topic_name(nsqd: Any) -> None:
    result = gnsqlite(
        ["pub", "--topic", "bad topic!", "--nsqd-tcp-address", nsqd.tcp_address], input=b"x\n"
    )
    assert_one_line_error(result, 2, "bad topic!")


def test_pub_to_an_unreachable_nsqd_fails_in_one_line() -> None:
    address = f"127.0.0.1:{free_port('127.0.0.1')}"
    result = gnsqlite(["pub", "--topic", "t", "--nsqd-tcp-address", address], input=b"x\n")
    assert_one_line_error(result, 1, f"cannot reach nsqd at {address}")


def test_pub_with_a_malformed_address_or_missing_file_fails_in_one_line(tmp_path: Path) -> None:
    result = gnsqlite(["pub", "--topic", "t", "--nsqd-tcp-address", "nowhere"], input=b"x\n")
    assert_one_line_error(result, 2, "'nowhere'")
    missing = str(tmp_path / "missing.txt")
    result = gnsqlite(["pub", "--topic", "t", "--nsqd-tcp-address", "127.0.0.1:1", missing])
    assert_one_line_error(result, 2, "cannot read", "missing.txt")


def test_stats_shows_topics_and_channels(nsqd: Any) -> None:
    nsqd.http.create_topic("orders")
    nsqd.http.create_channel("orders", "billing")
    nsqd.http.mpub("orders", [b"a", b"b", b"c"])
    wait_until(lambda: (_topic(nsqd, "orders") or {}).get("message_count") == 3, timeout=10)
    result = gnsqlite(["stats", "--nsqd-http-address", nsqd.http_address])
    assert result.returncode == 0, result
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["TOPIC", "/", "CHANNEL", "DEPTH"]
    assert lines[1].split() == ["orders", "0", "3"]
    assert lines[2].split() == ["billing", "3", "0", "0", "0", "0", "3", "0"]
    document = json.loads(
        gnsqlite(["stats", "--nsqd-http-address", nsqd.http_address, "--json"]).stdout
    )
    assert document[0]["channels"][0]["depth"] == 3


def test_stats_through_lookupd(nsqlookupd: Any, nsqd_factory: Any) -> None:
    nsqd = nsqd_factory(lookupd=nsqlookupd)
    nsqd.http.pub("seen", b"x")
    wait_until(lambda: "seen" in nsqlookupd.http.topics(), timeout=10)
    result = gnsqlite(["stats", "--lookupd-http-address", nsqlookupd.http_address])
    assert result.returncode == 0, result
    assert "1 nsqd registered" in result.stdout
    assert any(line.split()[:1] == ["seen"] for line in result.stdout.splitlines())


def test_stats_of_an_unreachable_server_or_bad_topic_is_one_line() -> None:
    address = f"127.0.0.1:{free_port('127.0.0.1')}"
    assert_one_line_error(gnsqlite(["stats", "--nsqd-http-address", address]), 1, address)
    assert_one_line_error(gnsqlite(["stats", "--lookupd-http-address", address]), 1, address)
    result = gnsqlite(["stats", "--nsqd-http-address", address, "--topic", "no/pe"])
    assert_one_line_error(result, 2, "no/pe")
