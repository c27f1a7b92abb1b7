"""nsqd's HTTP port given where its TCP port belongs, and back: one line naming the port to give.

The commonest newcomer mistake: ``tail`` looped forever on ``frame size
1213486160 exceeds the maximum`` (the bytes ``HTTP``), ``stats`` printed
``E_BAD_PROTOCOL`` as an HTTP status. Run on both brokers.
"""

from __future__ import annotations

from typing import Any

from cli_helpers import assert_one_line_error, gnsqlite

TCP_HINT = "give nsqd's TCP port (usually 4150)"
HTTP_HINT = "that is nsqd's TCP port (usually 4150); give its HTTP port (usually 4151)"


def test_tail_and_pub_given_the_http_port_fail_at_once_naming_the_tcp_port(nsqd: Any) -> None:
    http = nsqd.http_address
    result = gnsqlite(["tail", "--topic", "t", "--nsqd-tcp-address", http], timeout=15)
    assert_one_line_error(result, 1, f"wrong port for nsqd at {http}", "answered in HTTP", TCP_HINT)
    result = gnsqlite(["pub", "--topic", "t", "--nsqd-tcp-address", http], input=b"x\n")
    assert_one_line_error(result, 1, f"wrong port for nsqd at {http}", TCP_HINT)


def test_stats_and_dashboard_given_the_tcp_port_name_the_http_port(nsqd: Any) -> None:
    tcp = nsqd.tcp_address
    result = gnsqlite(["stats", "--nsqd-http-address", tcp])
    assert_one_line_error(result, 1, f"wrong port for nsqd at {tcp}", "E_BAD_PROTOCOL", HTTP_HINT)
    result = gnsqlite(["dashboard", "--nsqd-http-address", tcp, "--port", "0"])
    assert_one_line_error(result, 1, f"wrong port for nsqd at {tcp}", HTTP_HINT)


def test_nsqlookupd_ports_swapped_are_named_too(nsqlookupd: Any) -> None:
    tcp = nsqlookupd.tcp_address
    result = gnsqlite(["tail", "--topic", "t", "--lookupd-http-address", tcp])
    assert_one_line_error(
        result,
        1,
        f"wrong port for nsqlookupd at {tcp}",
        "that is nsqlookupd's TCP port (usually 4160); give its HTTP port (usually 4161)",
    )
    result = gnsqlite(["tail", "--topic", "t", "--nsqd-tcp-address", tcp])
    assert_one_line_error(result, 1, "that is nsqlookupd's TCP port (usually 4160)", TCP_HINT)
