"""Fixtures for the embedded broker's tests: an in-process Broker on free ports."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import gevent
import pytest

from gnsqlite.broker import Broker


def wait_for(predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.01) -> Any:
    """Poll ``predicate`` (yielding to the hub) until it is truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s: {predicate}")
        gevent.sleep(interval)


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
