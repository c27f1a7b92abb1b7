"""Dead-letter topics against a live nsqd (embedded, or real with GNSQLITE_NSQD).

Exact accounting: every message is finished once after its handler succeeded,
or dead-lettered once (then finished), and requeued on every failed attempt
and every failed dead-letter publish; nothing is lost while the dead-letter
nsqd is down.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Callable

import pytest

from gnsqlite import ConfigError, InvalidNameError
from gnsqlite.consumer import Consumer
from gnsqlite.deadletter import decode_envelope
from gnsqlite.http import NsqdHTTPClient
from gnsqlite.message import Message
from gnsqlite.testing import FaultProxy, NsqdServer, wait_until
from gnsqlite.testing.faults import live_greenlets

TOPIC = "dl_source"
CHANNEL = "work"
DEAD = "dl_source.dead"
MAX_ATTEMPTS = 2
SEED = 16


def bodies(count: int, bad_share: float) -> tuple[list[bytes], set[bytes]]:
    """``count`` distinct bodies (a few binary) and the subset the handler refuses."""
    rng = random.Random(SEED)
    made = [b"msg-%d" % i if i % 7 else b"\xff\x00bin-%d" % i for i in range(count)]
    bad = {body for body in made if rng.random() < bad_share}
    assert 0 < len(bad) < count
    return made, bad


class Ledger:
    """What the handler and the give-up hook saw, per body."""

    def __init__(self, bad: set[bytes]) -> None:
        self.bad = bad
        self.handled: collections.Counter[bytes] = collections.Counter()
        self.succeeded: collections.Counter[bytes] = collections.Counter()
        self.given_up: collections.Counter[bytes] = collections.Counter()
        self.ids: dict[bytes, str] = {}
        self.timestamps: dict[bytes, int] = {}

    def handle(self, message: Message) -> None:
        self.handled[message.body] += 1
        self.ids.setdefault(message.body, message.id)
        self.timestamps.setdefault(message.body, message.timestamp)
        if message.body in self.bad:
            raise ValueError(f"refused {message.body!r} on attempt {message.attempts}")
        self.succeeded[message.body] += 1


def expected_handling(good: set[bytes], bad: set[bytes]) -> collections.Counter[bytes]:
    """Each good body handled once, each bad one on every attempt before giving up."""
    return collections.Counter({b: 1 for b in good} | {b: MAX_ATTEMPTS for b in bad})


def collect(server: NsqdServer, topic: str, count: int) -> list[bytes]:
    """Read ``count`` messages of ``topic`` on a fresh channel (and a few more, if any)."""
    got: list[bytes] = []
    reader = Consumer(
        topic,
        "check",
        lambda m: got.append(m.body),
        nsqd_tcp_addresses=[server.tcp_address],
        max_in_flight=50,
    )
    reader.start()
    try:
        wait_until(lambda: len(got) >= count, timeout=20, message=f"{count} on {topic}")
        wait_until(lambda: server.channel_drained(topic, "check"), timeout=10)
    finally:
        reader.close(timeout=5.0)
    return got


def test_options_are_validated_and_the_constructor_opens_nothing() -> None:
    before = live_greenlets()
    consumer = Consumer(
        TOPIC,
        CHANNEL,
        lambda m: None,
        nsqd_tcp_addresses=["127.0.0.1:1"],
        dead_letter_topic=DEAD,
        dead_letter_nsqd="127.0.0.1:2",
    )
    assert live_greenlets() == before
    assert consumer.stats()["dead_letters"] == {
        "topic": DEAD,
        "envelope": False,
        "published": 0,
        "failed": 0,
        "nsqd": [],
    }
    consumer.close()
    assert live_greenlets() == before
    with pytest.raises(InvalidNameError, match="dead_letter_topic: topic name 'no good'"):
        Consumer(TOPIC, CHANNEL, nsqd_tcp_addresses="127.0.0.1:1", dead_letter_topic="no good")
    with pytest.raises(ConfigError, match="is the topic consumed"):
        Consumer(TOPIC, CHANNEL, nsqd_tcp_addresses="127.0.0.1:1", dead_letter_topic=TOPIC)
    with pytest.raises(ConfigError, match="need a dead_letter_topic"):
        Consumer(TOPIC, CHANNEL, nsqd_tcp_addresses="127.0.0.1:1", dead_letter_envelope=True)
    with pytest.raises(ConfigError, match="max_attempts of 1 or more"):
        Consumer(
            TOPIC, CHANNEL, nsqd_tcp_addresses="127.0.0.1:1", dead_letter_topic=DEAD, max_attempts=0
        )
    with pytest.raises(ConfigError, match="dead_letter_nsqd"):
        Consumer(
            TOPIC,
            CHANNEL,
            nsqd_tcp_addresses="127.0.0.1:1",
            dead_letter_topic=DEAD,
            dead_letter_nsqd="no-port",
        )


def test_exhausted_messages_are_dead_lettered_once_in_an_envelope(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    sent, bad = bodies(60, 0.3)
    NsqdHTTPClient(nsqd.http_address).mpub(TOPIC, sent)
    ledger = Ledger(bad)
    published_at_hook: list[int] = []
    consumer: Consumer

    def hook(message: Message) -> None:
        ledger.given_up[message.body] += 1
        published_at_hook.append(consumer.stats()["dead_letters"]["published"])
        raise RuntimeError("a broken hook does not requeue a dead-lettered message")

    consumer = Consumer(
        TOPIC,
        CHANNEL,
        ledger.handle,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=10,
        max_attempts=MAX_ATTEMPTS,
        requeue_delay=0.0,
        backoff=None,
        on_giving_up=hook,
        dead_letter_topic=DEAD,
        dead_letter_envelope=True,
    )
    consumers.append(consumer)
    consumer.start()
    wait_until(
        lambda: nsqd.channel_drained(TOPIC, CHANNEL) and sum(ledger.given_up.values()) == len(bad),
        timeout=30,
        message="every message answered",
    )

    good = set(sent) - bad
    assert ledger.succeeded == collections.Counter(good)  # each good body handled once
    assert ledger.handled == expected_handling(good, bad)
    assert ledger.given_up == collections.Counter(bad)
    # the hook runs after the publish: each call sees its own message counted
    assert published_at_hook == list(range(1, len(bad) + 1))
    stats = consumer.stats()
    assert stats["dead_letters"]["published"] == len(bad)
    assert stats["dead_letters"]["failed"] == 0
    assert stats["totals"]["finished"] == len(sent)
    assert stats["totals"]["requeued"] == len(bad) * MAX_ATTEMPTS
    channel = nsqd.channel_stats(TOPIC, CHANNEL)
    assert channel["requeue_count"] == len(bad) * MAX_ATTEMPTS
    assert channel["timeout_count"] == 0

    letters = [decode_envelope(raw) for raw in collect(nsqd, DEAD, len(bad))]
    assert sorted(letter.body for letter in letters) == sorted(bad)  # once each, binary intact
    for letter in letters:
        assert (letter.topic, letter.channel) == (TOPIC, CHANNEL)
        assert letter.attempts == MAX_ATTEMPTS + 1
        assert letter.id == ledger.ids[letter.body]
        assert letter.timestamp == ledger.timestamps[letter.body]
        assert letter.nsqd == nsqd.tcp_address
        assert letter.dead_lettered_at >= letter.timestamp
        assert letter.error is not None and letter.error.type == "ValueError"
        assert letter.error.message == f"refused {letter.body!r} on attempt {MAX_ATTEMPTS}"


def test_a_batch_handler_s_failures_are_dead_lettered_with_its_error(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    """A batch that keeps failing: each message dead-lettered once, carrying the batch's error."""
    sent, bad = bodies(40, 0.3)
    NsqdHTTPClient(nsqd.http_address).mpub(TOPIC, sent)
    stored: collections.Counter[bytes] = collections.Counter()

    def store(messages: list[Message]) -> None:
        refused = [m for m in messages if m.body in bad]
        for message in messages:
            if message.body not in bad:
                stored[message.body] += 1
                message.finish()  # answered singly first: the failure requeues the rest
        if refused:
            raise ValueError(f"refused {len(refused)} of {len(messages)}")

    consumer = Consumer(
        TOPIC,
        CHANNEL,
        batch_handler=store,
        batch_size=10,
        batch_timeout=0.05,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=10,
        max_attempts=MAX_ATTEMPTS,
        requeue_delay=0.0,
        backoff=None,
        on_giving_up=lambda m: None,
        dead_letter_topic=DEAD,
        dead_letter_envelope=True,
    )
    consumers.append(consumer)
    consumer.start()
    wait_until(
        lambda: (
            nsqd.channel_drained(TOPIC, CHANNEL)
            and consumer.stats()["dead_letters"]["published"] == len(bad)
        ),
        timeout=30,
        message="every message answered",
    )
    assert stored == collections.Counter(set(sent) - bad)  # each good body stored once
    assert nsqd.channel_stats(TOPIC, CHANNEL)["requeue_count"] == len(bad) * MAX_ATTEMPTS
    letters = [decode_envelope(raw) for raw in collect(nsqd, DEAD, len(bad))]
    assert sorted(letter.body for letter in letters) == sorted(bad)
    for letter in letters:
        assert letter.attempts == MAX_ATTEMPTS + 1
        assert letter.error is not None and letter.error.type == "ValueError"
        assert letter.error.message.startswith("refused ")


def test_raw_dead_letters_carry_the_body_alone(nsqd: NsqdServer, consumers: list[Consumer]) -> None:
    NsqdHTTPClient(nsqd.http_address).mpub(TOPIC, [b"good", b'{"format": 1}', b"\x00\x01"])
    bad = {b'{"format": 1}', b"\x00\x01"}
    ledger = Ledger(bad)
    consumer = Consumer(
        TOPIC,
        CHANNEL,
        ledger.handle,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=3,
        max_attempts=1,
        requeue_delay=0.0,
        backoff=None,
        on_giving_up=lambda m: None,
        dead_letter_topic=DEAD,
    )
    consumers.append(consumer)
    consumer.start()
    wait_until(lambda: consumer.stats()["dead_letters"]["published"] == 2, timeout=20)
    assert sorted(collect(nsqd, DEAD, 2)) == sorted(bad)


def test_dead_letter_nsqd_down_requeues_then_delivers_once_back(
    nsqd: NsqdServer, nsqd_factory: Callable[..., NsqdServer], consumers: list[Consumer]
) -> None:
    dead_nsqd = nsqd_factory()
    dead_nsqd.http.create_topic(DEAD)
    dead_nsqd.http.create_channel(DEAD, "check")  # so the dead letters wait for the check
    dead_nsqd.stop()
    sent, bad = bodies(30, 0.3)
    NsqdHTTPClient(nsqd.http_address).mpub(TOPIC, sent)
    ledger = Ledger(bad)
    consumer = Consumer(
        TOPIC,
        CHANNEL,
        ledger.handle,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=10,
        max_attempts=MAX_ATTEMPTS,
        requeue_delay=0.0,
        backoff=None,
        on_giving_up=lambda m: ledger.given_up.update([m.body]),
        dead_letter_topic=DEAD,
        dead_letter_nsqd=dead_nsqd.tcp_address,
        dead_letter_timeout=0.3,
        reconnect_interval=0.05,
        max_reconnect_interval=0.2,
    )
    consumers.append(consumer)
    before = live_greenlets()
    consumer.start()
    # every bad message failed to be dead-lettered at least once, and is still in the channel
    wait_until(lambda: consumer.stats()["dead_letters"]["failed"] >= 2 * len(bad), timeout=30)
    good = set(sent) - bad
    wait_until(lambda: ledger.succeeded == collections.Counter(good), timeout=10)

    def waiting() -> int:
        channel = nsqd.channel_stats(TOPIC, CHANNEL)
        return int(channel["depth"] + channel["in_flight_count"] + channel["deferred_count"])

    # (polled: a message moving from in flight to deferred is briefly in neither)
    wait_until(lambda: waiting() == len(bad), timeout=10, message="the bad ones still in nsqd")
    assert not ledger.given_up  # the hook runs only once the dead letter is safe

    dead_nsqd.start()  # same ports and data path
    wait_until(
        lambda: (
            nsqd.channel_drained(TOPIC, CHANNEL)
            and consumer.stats()["dead_letters"]["published"] == len(bad)
        ),
        timeout=30,
        message="dead-lettered once the nsqd is back",
    )
    stats = consumer.stats()
    failed = stats["dead_letters"]["failed"]
    assert ledger.given_up == collections.Counter(bad)
    assert ledger.handled == expected_handling(good, bad)
    assert stats["totals"]["finished"] == len(sent)
    # requeued: each failed attempt, and each failed dead-letter publish
    assert stats["totals"]["requeued"] == len(bad) * MAX_ATTEMPTS + failed
    consumer.close()  # closes its dead-letter producer too: no greenlet of either is left
    wait_until(lambda: live_greenlets() <= before, timeout=5, message="greenlets ended")
    assert sorted(collect(dead_nsqd, DEAD, len(bad))) == sorted(bad)


def test_a_stalled_dead_letter_publish_times_out_and_requeues(
    nsqd: NsqdServer, fault_proxy: Callable[[str], FaultProxy], consumers: list[Consumer]
) -> None:
    proxy = fault_proxy(nsqd.tcp_address)  # the dead-letter nsqd at another address
    sent, bad = bodies(30, 0.3)
    first = sorted(bad)[0]
    ledger = Ledger(bad)
    consumer = Consumer(
        TOPIC,
        CHANNEL,
        ledger.handle,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=10,
        max_attempts=1,
        requeue_delay=0.0,
        backoff=None,
        on_giving_up=lambda m: ledger.given_up.update([m.body]),
        dead_letter_topic=DEAD,
        dead_letter_nsqd=proxy.address,
        dead_letter_timeout=0.3,
    )
    consumers.append(consumer)
    consumer.start()
    NsqdHTTPClient(nsqd.http_address).pub(TOPIC, first)
    wait_until(lambda: consumer.stats()["dead_letters"]["published"] == 1, timeout=20)

    proxy.stall()  # connected, then silent: the PUBs go out and get no answer
    NsqdHTTPClient(nsqd.http_address).mpub(TOPIC, [b for b in sent if b != first])
    wait_until(lambda: consumer.stats()["dead_letters"]["failed"] >= len(bad) - 1, timeout=30)
    good = set(sent) - bad
    wait_until(lambda: ledger.succeeded == collections.Counter(good), timeout=10)
    assert ledger.given_up == collections.Counter([first])  # no hook for a failed publish

    proxy.resume()
    wait_until(
        lambda: nsqd.channel_drained(TOPIC, CHANNEL) and sum(ledger.given_up.values()) == len(bad),
        timeout=30,
        message="dead-lettered once the path flows again",
    )
    stats = consumer.stats()
    assert ledger.given_up == collections.Counter(bad)
    assert stats["totals"]["finished"] == len(sent)
    assert stats["totals"]["requeued"] == len(bad) + stats["dead_letters"]["failed"]
    # nothing lost; a publish that timed out may still have landed: at most one extra each
    extra = stats["dead_letters"]["failed"]
    letters = collections.Counter(collect(nsqd, DEAD, len(bad)))
    assert set(letters) == bad
    assert sum(letters.values()) - len(bad) <= extra
