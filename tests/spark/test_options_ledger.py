"""The connector's pure parts: option parsing and the source's ledger (no Spark needed)."""

from __future__ import annotations

import pytest

from gnsqlite import ConfigError
from gnsqlite.spark.ledger import Ledger
from gnsqlite.spark.options import (
    describe_options,
    parse_sink_options,
    parse_source_options,
)

SOURCE = {"topic": "pages", "channel": "spark", "nsqdtcpaddresses": "127.0.0.1:4150"}


def test_source_options_are_case_insensitive_with_documented_defaults() -> None:
    o = parse_source_options(
        {
            "TOPIC": "pages",
            "Channel": "spark",
            "lookupdhttpaddresses": "127.0.0.1:4161, 127.0.0.1:4162",
            "maxmessagesperbatch": "500",
            "heartbeatinterval": "5",
            "lookupd_poll_interval": "1.5",
            "lowRdyTimeout": "12",
        }
    )
    assert o.lookupd_http_addresses == ("127.0.0.1:4161", "127.0.0.1:4162")
    assert o.max_messages_per_batch == 500
    assert o.max_in_flight == 1000  # two batches
    assert o.connection.heartbeat_interval == 5.0
    assert o.consumer == {"lookupd_poll_interval": 1.5, "low_rdy_timeout": 12.0}
    assert parse_source_options(SOURCE).max_messages_per_batch == 10000


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"maxMessagesPerBach": "10"}, "'maxMessagesPerBach'.*maxMessagesPerBatch"),
        ({"maxmessagesperbatch": "0"}, "maxMessagesPerBatch='0' is out of range"),
        ({"maxmessagesperbatch": "many"}, "maxMessagesPerBatch='many' is not an int"),
        ({"heartbeatinterval": "0.1"}, "heartbeat_interval"),
        ({"maxmessagesperpublish": "10"}, "'maxmessagesperpublish' is for writing only"),
        ({"nsqdtcpaddresses": "nohost"}, "nsqdTcpAddresses"),
        (
            {"lookupdhttpaddresses": "http://127.0.0.1:4161"},
            "lookupdHttpAddresses: give host:port without a scheme",
        ),
    ],
)
def test_a_bad_source_option_is_named(extra: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        parse_source_options({**SOURCE, **extra})


def test_source_takes_the_dead_letter_options() -> None:
    o = parse_source_options(
        {
            **SOURCE,
            "maxAttempts": "3",
            "deadLetterTopic": "pages.dead",
            "deadletterenvelope": "true",
            "dead_letter_nsqd": "h:1,h:2",
            "deadLetterTimeout": "2.5",
        }
    )
    assert o.max_attempts == 3
    assert o.consumer == {
        "dead_letter_topic": "pages.dead",
        "dead_letter_envelope": True,
        "dead_letter_nsqd": ("h:1", "h:2"),
        "dead_letter_timeout": 2.5,
    }
    with pytest.raises(ConfigError, match="needs max_attempts of 1 or more"):
        parse_source_options({**SOURCE, "deadLetterTopic": "pages.dead"})  # maxAttempts 0
    with pytest.raises(ConfigError, match="deadLetterTopic='pages' is the topic read"):
        parse_source_options({**SOURCE, "maxAttempts": "3", "deadLetterTopic": "pages"})
    with pytest.raises(ConfigError, match="dead_letter_topic: topic name 'a b'"):
        parse_source_options({**SOURCE, "maxAttempts": "3", "deadLetterTopic": "a b"})
    with pytest.raises(ConfigError, match="need a dead_letter_topic"):
        parse_source_options({**SOURCE, "deadLetterEnvelope": "true"})


def test_source_needs_topic_channel_and_an_address() -> None:
    with pytest.raises(ConfigError, match="'channel' is required"):
        parse_source_options({"topic": "t", "nsqdtcpaddresses": "127.0.0.1:4150"})
    with pytest.raises(ConfigError, match="lookupdHttpAddresses"):
        parse_source_options({"topic": "t", "channel": "c"})


def test_sink_options() -> None:
    o = parse_sink_options(
        {
            "nsqdtcpaddresses": "127.0.0.1:4150",
            "checkpointlocation": "/x",
            "maxbodysize": "65536",
            "snappy": "true",
        }
    )
    assert o.topic is None and o.max_body_size == 65536 and o.connection.snappy
    with pytest.raises(ConfigError, match="'channel' is for reading only"):
        parse_sink_options({"nsqdtcpaddresses": "127.0.0.1:4150", "channel": "c"})
    with pytest.raises(ConfigError, match="nsqdTcpAddresses"):
        parse_sink_options({"topic": "t"})


def test_every_option_is_documented() -> None:
    table = describe_options()
    for name in ("maxMessagesPerBatch", "maxInFlight", "maxBodySize", "availableNowIdleTimeout"):
        assert f"`{name}`" in table


def test_ledger_batches_commits_and_flushes() -> None:
    ledger: Ledger[str] = Ledger("s1")
    start = ledger.initial_offset()
    for i in range(5):
        ledger.receive(f"m{i}")
    end = ledger.latest(start, 3)
    assert ledger.batch(start, end) == ["m0", "m1", "m2"]
    end2 = ledger.latest(end, 3)
    assert ledger.batch(end, end2) == ["m3", "m4"]
    assert ledger.commit(end) == ["m0", "m1", "m2"]
    # Nothing new: a flush offset makes Spark plan a batch that commits end2.
    flush = ledger.latest(end2, 3)
    assert flush != end2 and ledger.batch(end2, flush) == []
    assert ledger.commit(end2) == ["m3", "m4"]
    assert ledger.latest(flush, 3) == flush  # nothing new, nothing uncommitted


def test_ledger_ignores_offsets_of_another_session() -> None:
    old: Ledger[str] = Ledger("old")
    old.receive("a")
    old_end = old.latest(old.initial_offset(), 10)
    new: Ledger[str] = Ledger("new")
    new.receive("a-again")
    assert new.batch(old.initial_offset(), old_end) == []  # a replayed batch reads empty
    assert new.commit(old_end) == []
    end = new.latest(old_end, 10)
    assert end["session"] == "new" and new.batch(old_end, end) == ["a-again"]


def test_ledger_takes_only_eligible_messages() -> None:
    ledger: Ledger[int] = Ledger("s")
    for i in (1, 9, 2, 8):
        ledger.receive(i)
    start = ledger.initial_offset()
    end = ledger.latest(start, None, lambda m: m < 5)
    assert ledger.batch(start, end) == [1, 2]
    assert list(ledger.buffered) == [9, 8]
    assert sorted(ledger.release()) == [1, 2, 8, 9]


def test_the_flood_meter_tells_a_backlog_draining_from_a_stream() -> None:
    from gnsqlite.spark.flood import FloodMeter

    meter = FloodMeter(window=0.05, messages=1250)
    assert not meter.flooding(0.0)
    meter.arrived(2500, 0.001)  # a full list at once: a flood while it lasts
    assert meter.flooding(0.01)
    assert not meter.flooding(0.06)  # nothing for a window: over
    for i in range(20):  # 20 messages every 10 ms: a stream, never a flood
        meter.arrived(20, 1.0 + i * 0.01)
        assert not meter.flooding(1.0 + i * 0.01)
    for i in range(10):  # 500 every 10 ms: 2500 per window
        meter.arrived(500, 2.0 + i * 0.01)
    assert meter.flooding(2.095)
    assert not meter.flooding(2.2)
