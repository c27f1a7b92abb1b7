"""What the dashboard samples: cumulative counters and the events between two looks."""

from __future__ import annotations

from typing import Any

from gnsqlite.dashboard.sources import ConsumerSource, HTTPSource, ProducerSource
from gnsqlite.testing import free_port


class _FakeConsumer:
    topic = "clicks"
    channel = "archive"

    def __init__(self) -> None:
        self.conns: list[dict[str, Any]] = []
        self.backoff = "normal"
        self.starved = False

    def stats(self) -> dict[str, Any]:
        totals = {
            k: sum(c[k] for c in self.conns)
            for k in ("rdy", "in_flight", "received", "finished", "requeued")
        }
        return {
            "topic": self.topic,
            "channel": self.channel,
            "max_in_flight": 10,
            "connections": self.conns,
            "totals": totals,
            "backoff": {"state": self.backoff},
            "starved": self.starved,
        }


def _conn(address: str, received: int, finished: int, requeued: int = 0) -> dict[str, Any]:
    return {
        "address": address,
        "rdy": 5,
        "rdy_reason": "even",
        "in_flight": received - finished - requeued,
        "received": received,
        "finished": finished,
        "requeued": requeued,
    }


def test_counters_stay_cumulative_when_a_connection_goes_and_comes_back() -> None:
    consumer = _FakeConsumer()
    source = ConsumerSource(consumer, 0)
    consumer.conns = [_conn("a:1", 10, 9), _conn("b:1", 5, 5)]
    state, events = source.sample()
    assert state["totals"]["received"] == 15 and state["totals"]["finished"] == 14
    assert events == ["connected to a:1", "connected to b:1"]
    assert [(c["rdy"], c["rdy_reason"]) for c in state["connections"]] == [(5, "even")] * 2

    consumer.conns = [_conn("a:1", 12, 12)]  # b went away with its counts
    consumer.backoff, consumer.starved = "window", True
    state, events = source.sample()
    assert state["totals"]["received"] == 17  # never goes down
    assert events == ["lost the connection to b:1", "backoff: normal -> window", "starved"]

    consumer.conns = [_conn("a:1", 12, 12), _conn("b:1", 1, 1)]  # b back, counting from 0
    state, events = source.sample()
    assert state["totals"]["received"] == 18 and state["totals"]["finished"] == 18
    assert events == ["connected to b:1"]


class _FakeConn:
    def __init__(self, name: str) -> None:
        self.name = name


class _FakeProducer:
    addresses = ("a:1", "b:1")

    def __init__(self) -> None:
        self.connections = [_FakeConn("a:1")]
        self.errors: dict[str, int] = {}

    def stats(self) -> dict[str, Any]:
        return {
            "publishes": [{"topic": "t", "command": "pub", "count": 3, "messages": 3}],
            "errors": self.errors,
            "totals": {
                "publishes": 3,
                "messages": 3,
                "errors": sum(self.errors.values()),
                "in_flight": 1,
            },
        }


def test_the_producer_card_gets_its_counts_and_new_errors_become_events() -> None:
    producer = _FakeProducer()
    source = ProducerSource(producer, 1)
    state, events = source.sample()
    assert state["counts"] == {"publishes": 3, "messages": 3, "errors": 0, "in_flight": 1}
    assert state["publishes"] == [{"topic": "t", "command": "pub", "count": 3, "messages": 3}]
    assert state["connections"] == [
        {"address": "a:1", "connected": True},
        {"address": "b:1", "connected": False},
    ]
    assert events == []
    producer.errors = {"E_BAD_MESSAGE": 2}
    producer.connections = []
    state, events = source.sample()
    assert state["errors"] == {"E_BAD_MESSAGE": 2}
    assert events == ["lost the connection to a:1", "2 publish errors: E_BAD_MESSAGE"]
    state, events = source.sample()
    assert events == []  # no growth, no event


def test_an_unreachable_nsqd_is_an_error_and_an_event_not_an_exception() -> None:
    address = f"127.0.0.1:{free_port('127.0.0.1')}"
    source = HTTPSource([address], timeout=1.0)
    state, events = source.sample()
    assert address in state["errors"]
    assert len(events) == 1 and events[0].startswith(address)
    assert state["topics"] == [] and state["totals"]["received"] == 0
    assert source.sample()[1] == []  # said once, not every tick
