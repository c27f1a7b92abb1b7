"""Fixtures for the embedded broker's tests: an in-process Broker on free ports."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gnsqlite.broker import Broker


@pytest.fixture
def make_broker() -> Iterator[Callable[..., Broker]]:
    """``make_broker(**options)`` starts a Broker on free ports; all stopped after the test."""
    brokers: list[Broker] = []

    def make(**options: Any) -> Broker:
        options.setdefault("tcp_address", "127.0.0.1:0")
        options.setdefault("http_address", "127.0.0.1:0")
        options.setdefault("broadcast_address", "127.0.0.1")
        broker = Broker(**options)
        broker.start()
        brokers.append(broker)
        return broker

    yield make
    for broker in brokers:
        broker.stop()


@pytest.fixture
def broker(make_broker: Callable[..., Broker]) -> Broker:
    """A broker with short timeouts (msg_timeout 1 s, queue scan 20 ms)."""
    return make_broker(msg_timeout=1.0, queue_scan_interval=0.02)
