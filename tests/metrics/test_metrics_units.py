"""gnsqlite.metrics and health() without a server: buckets, error codes, bad input, reasons."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry

from gnsqlite.consumer import Consumer
from gnsqlite.errors import (
    BadTopicError,
    ConnectionClosedError,
    NoConnectionsError,
    NSQTimeoutError,
    ServerError,
)
from gnsqlite.metrics import METRICS, Instrumentation, _Buckets, instrument
from gnsqlite.producer import Producer, error_code

pytestmark = pytest.mark.no_server
ROOT = Path(__file__).resolve().parents[2]

ISSUE_METRICS = {
    # name (a counter without _total) -> labels, as issue 15 lists them
    "gnsqlite_consumer_messages_received": ("topic", "channel", "nsqd"),
    "gnsqlite_consumer_messages_finished": ("topic", "channel", "nsqd"),
    "gnsqlite_consumer_messages_requeued": ("topic", "channel", "nsqd"),
    "gnsqlite_consumer_messages_given_up": ("topic", "channel", "nsqd"),
    "gnsqlite_consumer_in_flight": ("topic", "channel", "nsqd"),
    "gnsqlite_consumer_rdy": ("topic", "channel", "nsqd"),
    "gnsqlite_consumer_backoff_level": ("topic", "channel"),
    "gnsqlite_consumer_starved": ("topic", "channel"),
    "gnsqlite_consumer_handler_seconds": ("topic", "channel"),
    "gnsqlite_producer_publishes": ("topic", "command"),
    "gnsqlite_producer_publish_errors": ("code",),
    "gnsqlite_producer_publish_seconds": ("topic", "command"),
    "gnsqlite_connections": ("role", "nsqd", "state"),
}


def consumer(topic: str = "clicks", channel: str = "archive") -> Consumer:
    return Consumer(topic, channel, lambda m: None, nsqd_tcp_addresses=["127.0.0.1:4150"])


def test_every_metric_the_issue_lists_exists_with_its_labels() -> None:
    for name, labels in ISSUE_METRICS.items():
        assert name in METRICS, name
        assert METRICS[name].labels == labels, name
    kinds = {name: METRICS[name].kind for name in ISSUE_METRICS}
    assert kinds["gnsqlite_consumer_handler_seconds"] == "histogram"
    assert kinds["gnsqlite_producer_publish_seconds"] == "histogram"
    assert kinds["gnsqlite_consumer_messages_received"] == "counter"
    assert kinds["gnsqlite_consumer_rdy"] == "gauge"


def test_the_lease_and_age_counters_are_in_the_catalog_per_nsqd() -> None:
    # issue 39: TOUCHes sent to extend leases, messages past max_age
    for name in ("gnsqlite_consumer_touches", "gnsqlite_consumer_messages_expired"):
        assert METRICS[name].kind == "counter", name
        assert METRICS[name].labels == ("topic", "channel", "nsqd"), name
    registry = CollectorRegistry()
    instrument(consumer(), registry)
    names = {metric.name for metric in registry.collect()}
    assert {"gnsqlite_consumer_touches", "gnsqlite_consumer_messages_expired"} <= names


def test_an_idle_registry_exposes_every_family_with_no_samples_but_the_idle_clients() -> None:
    registry = CollectorRegistry()
    instrument(consumer(), registry)
    instrument(Producer("127.0.0.1:4150"), registry)
    names = {metric.name for metric in registry.collect()}
    assert {n for n in ISSUE_METRICS} <= names
    # not started: not connected, nothing counted
    value = registry.get_sample_value
    labels = {"role": "consumer", "nsqd": "127.0.0.1:4150"}
    assert value("gnsqlite_connections", {**labels, "state": "disconnected"}) == 1.0
    assert value("gnsqlite_connections", {**labels, "state": "connected"}) == 0.0
    assert value("gnsqlite_producer_in_flight") == 0.0
    assert value("gnsqlite_consumer_backoff_level", {"topic": "clicks", "channel": "archive"}) == 0


def test_buckets_count_each_observation_once_in_the_first_bound_not_below_it() -> None:
    buckets = _Buckets((0.1, 1.0))
    for seconds in (0.05, 0.1, 0.5, 1.0, 3.0, 7.0):
        buckets.observe(seconds)
    assert buckets.cumulative() == [("0.1", 2.0), ("1.0", 4.0), ("+Inf", 6.0)]
    assert buckets.sum == pytest.approx(11.65)


def test_instrumenting_twice_returns_the_same_and_counts_once() -> None:
    registry = CollectorRegistry()
    c = consumer()
    first = instrument(c, registry)
    assert instrument(c, registry) is first
    assert isinstance(first, Instrumentation)
    other = CollectorRegistry()
    assert instrument(c, other) is not first  # another registry: its own link
    first.close()
    first.close()  # safe twice
    assert (
        registry.get_sample_value(
            "gnsqlite_consumer_starved", {"topic": "clicks", "channel": "archive"}
        )
        is None
    )


def test_two_consumers_in_one_registry_are_told_apart_by_labels() -> None:
    registry = CollectorRegistry()
    instrument(consumer("clicks", "a"), registry)
    instrument(consumer("clicks", "b"), registry)
    instrument(consumer("views", "a"), registry)
    series = [
        s.labels
        for m in registry.collect()
        if m.name == "gnsqlite_consumer_starved"
        for s in m.samples
    ]
    assert sorted((s["topic"], s["channel"]) for s in series) == [
        ("clicks", "a"),
        ("clicks", "b"),
        ("views", "a"),
    ]
    # the same address watched by three consumers: three connections counted, one series
    assert (
        registry.get_sample_value(
            "gnsqlite_connections",
            {"role": "consumer", "nsqd": "127.0.0.1:4150", "state": "disconnected"},
        )
        == 3.0
    )


def test_instrument_refuses_what_it_cannot_read() -> None:
    with pytest.raises(TypeError, match="pass a gnsqlite Consumer or Producer"):
        instrument(object(), CollectorRegistry())
    with pytest.raises(ValueError, match="sync_interval"):
        instrument(consumer(), CollectorRegistry(), sync_interval=0)


def test_the_pynsq_drop_in_is_instrumented_through_its_client() -> None:
    from gnsqlite import nsq

    registry = CollectorRegistry()
    reader = nsq.Reader("clicks", "archive", lambda m: True, nsqd_tcp_addresses=["127.0.0.1:4150"])
    writer = nsq.Writer(["127.0.0.1:4150"])
    assert instrument(reader, registry).client is reader.consumer
    assert instrument(writer, registry).client is writer.producer


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (BadTopicError("bad"), "E_BAD_TOPIC"),
        (ServerError("x", code="E_SOMETHING_NEW"), "E_SOMETHING_NEW"),
        (NoConnectionsError({}, "none"), "no_connections"),
        (ConnectionClosedError("h:1", "closed"), "closed"),
        (NSQTimeoutError("late"), "timeout"),
    ],
)
def test_error_codes(error: BaseException, code: str) -> None:
    assert error_code(error) == code


def test_health_says_why_a_client_is_not_ok() -> None:
    c = consumer()
    health = c.health()
    assert not health.ok and health.reasons == ("not started: call start()",)
    assert [h.address for h in health.connections] == ["127.0.0.1:4150"]
    assert health.connections[0].last_frame_age is None
    p = Producer("127.0.0.1:4150")
    p.close()
    assert p.health().as_dict() == {
        "ok": False,
        "connected": [],
        "connections": [
            {
                "address": "127.0.0.1:4150",
                "connected": False,
                "last_message_age": None,
                "last_frame_age": None,
            }
        ],
        "backoff": "off",
        "backoff_level": 0,
        "reasons": ["closed"],
    }


def test_a_sync_adds_to_a_prometheus_histogram_what_observing_would_have() -> None:
    from prometheus_client import Histogram

    from gnsqlite.metrics import _add_growth

    bounds = (0.1, 1.0)
    observed = Histogram("observed", "each observed", registry=CollectorRegistry(), buckets=bounds)
    synced = Histogram("synced", "growth added", registry=CollectorRegistry(), buckets=bounds)
    mine = _Buckets(bounds)
    first = (0.05, 0.5, 3.0)
    for seconds in first:
        observed.observe(seconds)
        mine.observe(seconds)
    _add_growth(synced, mine, None)
    before = _Buckets(bounds)
    before.add(mine)
    for seconds in (0.2, 0.3, 9.0):
        observed.observe(seconds)
        mine.observe(seconds)
    _add_growth(synced, mine, before)
    _add_growth(synced, mine, mine)  # no growth: nothing added

    def samples(h: Histogram) -> dict[str, float]:
        return {
            s.name.split("_", 1)[1] + s.labels.get("le", ""): s.value
            for m in h.collect()
            for s in m.samples
            if "created" not in s.name
        }

    assert samples(synced) == samples(observed)
    assert samples(synced)["count"] == 6

    class ObserveOnly:  # a Histogram without the private values: replayed at the bounds
        def __init__(self) -> None:
            self.seen: list[float] = []

        def observe(self, seconds: float) -> None:
            self.seen.append(seconds)

    replayed = ObserveOnly()
    _add_growth(replayed, mine, None)
    assert sorted(replayed.seen) == [0.1, 1.0, 1.0, 1.0, 2.0, 2.0]


MULTIPROCESS_SCRIPT = """
import gevent
from prometheus_client import CollectorRegistry

from gnsqlite.consumer import Consumer
from gnsqlite.metrics import _EXPORTERS, exposition, instrument, multiprocess_mode
from gnsqlite.producer import Producer
from gnsqlite.timers import TimerWheel

assert multiprocess_mode()
registry = CollectorRegistry()
consumer = Consumer("clicks", "archive", lambda m: None, nsqd_tcp_addresses=["127.0.0.1:4150"])
producer = Producer("127.0.0.1:4150")
instrument(consumer, registry, sync_interval=0.05)
instrument(producer, registry, sync_interval=0.05)
exporter = _EXPORTERS[registry]
assert TimerWheel.for_hub().owned_by(exporter), "a sync timer while clients are instrumented"
down = 'gnsqlite_connections{nsqd="127.0.0.1:4150",role="%s",state="disconnected"} %s'
text = exposition()[0].decode()
assert down % ("consumer", "1.0") in text and down % ("producer", "1.0") in text, text
consumer.close()
producer.close()
gevent.sleep(0.3)  # a few sync intervals
assert not exporter.instruments, "closed clients are dropped"
assert not TimerWheel.for_hub().owned_by(exporter), "the timer stops with the last client"
text = exposition()[0].decode()
assert down % ("consumer", "0.0") in text and down % ("producer", "0.0") in text, text
print("ok")
"""


def test_multiprocess_mode_syncs_to_the_shared_files_and_stops_with_its_clients(
    tmp_path: Path,
) -> None:
    env = dict(
        os.environ,
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path),
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    done = subprocess.run(
        [sys.executable, "-c", MULTIPROCESS_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    assert list(tmp_path.glob("*.db")), "the metrics went to the shared directory"
