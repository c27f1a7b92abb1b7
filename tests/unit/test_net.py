"""Addresses: one form everywhere, and a malformed one named with what to write instead."""

from __future__ import annotations

import pytest

from gnsqlite.connection import Connection
from gnsqlite.errors import ConfigError
from gnsqlite.net import normalize_address, normalize_addresses, parse_address


def test_addresses_parse_to_one_form() -> None:
    assert parse_address("[::1]:4150") == ("::1", 4150)
    assert normalize_address(("localhost", 4150)) == "localhost:4150"
    assert normalize_addresses("x", ["a:1", "a:1", "b:2"]) == ("a:1", "b:2")


@pytest.mark.parametrize("bad", ["nohost", "host:", ":4150", "host:port"])
def test_a_malformed_address_is_a_config_error_saying_the_form(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"'host:port' \(like 127.0.0.1:4150\)"):
        Connection(bad)
    with pytest.raises(ConfigError, match="nsqd_tcp_addresses: an address is 'host:port'"):
        normalize_addresses("nsqd_tcp_addresses", [bad])


def test_an_address_with_a_scheme_is_refused_naming_what_to_write() -> None:
    # It parsed as the host "http://127.0.0.1" before, and failed only when connecting.
    with pytest.raises(ConfigError, match=r"with no scheme \('127.0.0.1:4161'\)"):
        normalize_addresses("lookupd_http_addresses", ["http://127.0.0.1:4161"])
