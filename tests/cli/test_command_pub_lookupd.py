"""``gnsqlite pub --lookupd-http-address``: the nsqd found through nsqlookupd (both brokers)."""

from __future__ import annotations

from typing import Any

import pytest
from cli_helpers import assert_one_line_error, gnsqlite

from gnsqlite.deadletter import DeadLetter
from gnsqlite.testing import free_port, wait_until


def test_pub_through_lookupd_spreads_the_batches_over_every_nsqd(
    nsqlookupd: Any, nsqd_factory: Any
) -> None:
    servers = [nsqd_factory(lookupd=nsqlookupd) for _ in range(2)]
    wanted = {s.tcp_address for s in servers}
    wait_until(lambda: wanted <= set(nsqlookupd.http.node_addresses()), timeout=10)
    lines = b"".join(b"line %d\n" % i for i in range(200))
    address = nsqlookupd.http_address
    result = gnsqlite(
        ["pub", "--topic", "found", "--lookupd-http-address", address, "--batch", "10"],
        input=lines,
    )
    assert result.returncode == 0, result
    assert "published 200 messages to 'found' in 20 MPUB batches" in result.stdout
    counts = [s.topic_stats("found")["message_count"] for s in servers]
    assert sum(counts) == 200
    assert min(counts) > 0, counts  # both took batches


@pytest.mark.no_server
@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--nsqd-tcp-address", "127.0.0.1:4150", "--lookupd-http-address", "127.0.0.1:4161"],
    ],
)
def test_pub_wants_one_kind_of_address(flags: list[str]) -> None:
    result = gnsqlite(["pub", "--topic", "t", *flags], input=b"x\n")
    assert_one_line_error(result, 2, "give --nsqd-tcp-address or --lookupd-http-address")


@pytest.mark.no_server
def test_pub_with_a_bad_or_unreachable_lookupd_fails_in_one_line() -> None:
    result = gnsqlite(["pub", "--topic", "t", "--lookupd-http-address", "nowhere"], input=b"x\n")
    assert_one_line_error(result, 2, "bad nsqlookupd HTTP address 'nowhere'")
    address = f"127.0.0.1:{free_port('127.0.0.1')}"
    result = gnsqlite(["pub", "--topic", "t", "--lookupd-http-address", address], input=b"x\n")
    assert_one_line_error(result, 1, f"cannot reach nsqlookupd at {address}")
    result = gnsqlite(
        ["pub", "--from-dead-letter", "t.dead", "--lookupd-http-address", address], input=b""
    )
    assert_one_line_error(result, 1, f"cannot reach nsqlookupd at {address}")


def test_pub_through_a_lookupd_that_lists_no_nsqd_says_so(nsqlookupd: Any) -> None:
    address = nsqlookupd.http_address
    result = gnsqlite(["pub", "--topic", "t", "--lookupd-http-address", address], input=b"x\n")
    assert_one_line_error(result, 1, "cannot reach any nsqd nsqlookupd lists")


def test_dead_letters_are_re_published_from_every_nsqd_nsqlookupd_lists(
    nsqlookupd: Any, nsqd_factory: Any
) -> None:
    servers = [nsqd_factory(lookupd=nsqlookupd) for _ in range(2)]
    address = nsqlookupd.http_address
    redrive = ["pub", "--from-dead-letter", "found.dead", "--lookupd-http-address", address]
    result = gnsqlite([*redrive, "--idle-timeout", "0.5"])
    assert result.returncode == 0, result  # no nsqd has the topic yet: nothing to do
    assert "re-published 0 dead letters from 'found.dead': no nsqd nsqlookupd lists" in (
        result.stdout
    )
    for n, server in enumerate(servers):
        server.http.create_topic("found.dead")
        server.http.create_channel("found.dead", "redrive")
        letters = [
            DeadLetter(
                "found", "c", f"{n}-{i}", 5, 0, server.tcp_address, 0, None, b"%d-%d" % (n, i)
            )
            for i in range(3)
        ]
        server.http.mpub("found.dead", [letter.encode() for letter in letters])
    wait_until(
        lambda: len(nsqlookupd.http.lookup("found.dead")["producers"]) == 2,
        timeout=10,
        message="both nsqd registered found.dead",
    )
    result = gnsqlite([*redrive, "--idle-timeout", "1"])
    assert result.returncode == 0, result
    assert "re-published 6 dead letters from 'found.dead' (found: 6)" in result.stdout
    wait_until(  # each finished once re-published
        lambda: all(s.channel_drained("found.dead", "redrive") for s in servers), timeout=10
    )
    published = sum(int(s.topic_stats("found").get("message_count", 0)) for s in servers)
    assert published == 6
