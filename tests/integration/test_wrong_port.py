"""A Consumer given nsqd's HTTP port as a TCP address says so once and does not retry.

Before, it logged ``frame size 1213486160 exceeds the maximum`` (the bytes
``HTTP``) and reconnected forever, backing off, on an error no retry heals.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gnsqlite.consumer import Consumer
from gnsqlite.message import Message
from gnsqlite.testing import wait_until


def _handle(message: Message) -> None:
    raise AssertionError("no message can come from an HTTP port")


def test_a_consumer_given_the_http_port_names_the_tcp_port_and_does_not_retry(
    nsqd: Any, caplog: pytest.LogCaptureFixture
) -> None:
    consumer = Consumer(
        "t",
        "c",
        _handle,
        nsqd_tcp_addresses=[nsqd.http_address],
        reconnect_interval=0.01,
        max_reconnect_interval=0.01,
    )
    with caplog.at_level(logging.INFO, logger="gnsqlite"):
        consumer.start()
        try:
            wait_until(lambda: _said(caplog, "not retried"), timeout=10, message="said once")
            # no retry pending: with a 10 ms interval one would already be due
            assert consumer._links._reconnect_timers == {}
            assert not _said(caplog, "reconnecting to")
        finally:
            consumer.close()
    (line,) = _said(caplog, "not retried")
    assert "answered in HTTP" in line and "give nsqd's TCP port (usually 4150)" in line, line


def _said(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]
