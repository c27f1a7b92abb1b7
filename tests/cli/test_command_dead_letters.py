"""Dead letters from the command line: ``tail --dead-letter`` and ``pub --from-dead-letter``."""

from __future__ import annotations

import json

from cli_helpers import assert_one_line_error, gnsqlite

from gnsqlite.consumer import Consumer
from gnsqlite.message import Message
from gnsqlite.testing import NsqdServer, wait_until

TOPIC = "orders"
CHANNEL = "billing"
DEAD = "orders.dead"


def dead_letter(nsqd: NsqdServer, bodies: list[bytes]) -> None:
    """Publish ``bodies`` to TOPIC; a consumer whose handler always fails dead-letters them."""

    def refuse(message: Message) -> None:
        raise KeyError(f"no customer for {message.body!r}")

    nsqd.http.mpub(TOPIC, bodies)
    consumer = Consumer(
        TOPIC,
        CHANNEL,
        refuse,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=5,
        max_attempts=1,
        requeue_delay=0.0,
        backoff=None,
        on_giving_up=lambda m: None,
        dead_letter_topic=DEAD,
        dead_letter_envelope=True,
    )
    consumer.start()
    try:
        wait_until(
            lambda: consumer.stats()["dead_letters"]["published"] == len(bodies),
            timeout=20,
            message="dead-lettered",
        )
        wait_until(lambda: nsqd.channel_drained(TOPIC, CHANNEL), timeout=10)
    finally:
        consumer.close(timeout=5.0)


def depth(nsqd: NsqdServer, topic: str, channel: str) -> int:
    stats = nsqd.channel_stats(topic, channel)
    return int(stats["depth"] + stats["in_flight_count"] + stats["deferred_count"])


def test_tail_decodes_dead_letter_envelopes(nsqd: NsqdServer) -> None:
    nsqd.http.create_topic(DEAD)
    for channel in ("as_json", "as_raw"):
        nsqd.http.create_channel(DEAD, channel)
    dead_letter(nsqd, [b"order 1", b"\xff\x00"])
    nsqd.http.pub(DEAD, b"not an envelope")
    tail = [
        "tail",
        "--topic",
        DEAD,
        "--nsqd-tcp-address",
        nsqd.tcp_address,
        "--dead-letter",
        "-n",
        "3",
    ]

    result = gnsqlite([*tail, "--channel", "as_json", "--format", "json"])
    assert result.returncode == 0, result
    records = [json.loads(line) for line in result.stdout.splitlines()]
    letters = [r for r in records if "topic" in r]
    assert sorted(r.get("body") or r["body_base64"] for r in letters) == ["/wA=", "order 1"]
    for r in letters:
        assert (r["topic"], r["channel"], r["attempts"], r["nsqd"]) == (
            TOPIC,
            CHANNEL,
            2,
            nsqd.tcp_address,
        )
        assert r["error"]["type"] == "KeyError" and "no customer for" in r["error"]["message"]
        assert len(r["id"]) == 16 and r["dead_lettered_at"] >= r["timestamp"] > 0
    [raw] = [r for r in records if "topic" not in r]
    assert raw["body"] == "not an envelope"
    assert "not a dead-letter envelope: not JSON" in result.stderr
    assert "printed as is" in result.stderr

    result = gnsqlite([*tail, "--channel", "as_raw"])
    assert result.returncode == 0, result
    lines = result.stdout.splitlines()  # the binary body's bytes read as U+FFFD
    assert len(lines) == 3 and "not an envelope" in lines
    letters = [line for line in lines if line != "not an envelope"]
    for line in letters:
        assert line.startswith("orders/billing id=")
        assert ' attempts=2 error="KeyError: \\"no customer for b' in line
    assert any(line.endswith('" order 1') for line in letters)


def test_pub_from_dead_letter_republishes_to_the_original_topic(nsqd: NsqdServer) -> None:
    nsqd.http.create_topic(DEAD)
    nsqd.http.create_channel(DEAD, "redrive")
    bodies = [b"order %d" % i for i in range(3)] + [b"\x00binary"]
    dead_letter(nsqd, bodies)
    redrive = [
        "pub",
        "--from-dead-letter",
        DEAD,
        "--nsqd-tcp-address",
        nsqd.tcp_address,
        "--idle-timeout",
        "1",
    ]

    result = gnsqlite(redrive)
    assert result.returncode == 0, result
    assert f"re-published 4 dead letters from {DEAD!r} ({TOPIC}: 4)" in result.stdout
    assert result.stdout.count(f"(attempts 2) to {TOPIC!r}") == 4
    wait_until(lambda: depth(nsqd, TOPIC, CHANNEL) == 4, timeout=10)
    assert depth(nsqd, DEAD, "redrive") == 0  # each finished once re-published
    got: list[bytes] = []
    reader = Consumer(
        TOPIC,
        CHANNEL,
        lambda m: got.append(m.body),
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=10,
    )
    reader.start()
    try:
        wait_until(lambda: len(got) == 4 and nsqd.channel_drained(TOPIC, CHANNEL), timeout=10)
    finally:
        reader.close(timeout=5.0)
    assert sorted(got) == sorted(bodies)  # the original bodies, not the envelopes

    # a raw dead letter carries no topic: refused (and kept) without --to
    nsqd.http.pub(DEAD, b"raw dead letter")
    result = gnsqlite(redrive)
    assert_one_line_error(result, 1, "is not a dead-letter envelope", "give --to TOPIC")
    wait_until(lambda: depth(nsqd, DEAD, "redrive") == 1, timeout=10)
    result = gnsqlite([*redrive, "--to", TOPIC, "-n", "1"])
    assert result.returncode == 0, result
    assert f"re-published 1 dead letters from {DEAD!r} ({TOPIC}: 1)" in result.stdout
    wait_until(
        lambda: depth(nsqd, DEAD, "redrive") == 0 and depth(nsqd, TOPIC, CHANNEL) == 1, timeout=10
    )


def test_a_refused_dead_letter_is_back_in_the_channel_when_the_command_ends(
    nsqd: NsqdServer,
) -> None:
    """Not left in flight until nsqd's --msg-timeout, where the next run cannot read it.

    The command sends RDY 0 before the refused letter's REQ; at RDY 64 nsqd
    sent it straight back, at times after CLOSE_WAIT (1 run in 10 or so on nsqd 1.3.0).
    """
    nsqd.http.create_topic(DEAD)
    nsqd.http.create_channel(DEAD, "redrive")
    nsqd.http.pub(DEAD, b"raw dead letter")
    redrive = ["pub", "--from-dead-letter", DEAD, "--nsqd-tcp-address", nsqd.tcp_address]
    for run in range(20):
        result = gnsqlite(redrive)
        assert_one_line_error(result, 1, "is not a dead-letter envelope", "give --to TOPIC")
        wait_until(
            lambda: nsqd.channel_stats(DEAD, "redrive")["depth"] == 1,
            timeout=5,
            message=f"run {run}: the letter back in the channel, not in flight",
        )


def test_pub_dead_letter_flags_are_checked() -> None:
    base = ["pub", "--nsqd-tcp-address", "127.0.0.1:4150"]
    result = gnsqlite([*base, "--from-dead-letter", DEAD, "--topic", TOPIC])
    assert_one_line_error(result, 2, "takes --to, not --topic")
    result = gnsqlite([*base, "--topic", TOPIC, "--to", TOPIC])
    assert_one_line_error(result, 2, "--to goes with --from-dead-letter")
    result = gnsqlite(base)
    assert_one_line_error(result, 2, "--topic is required (or --from-dead-letter TOPIC)")
    result = gnsqlite([*base, "--from-dead-letter", DEAD, "--to", DEAD])
    assert_one_line_error(result, 2, "is the dead-letter topic read")
    result = gnsqlite([*base, "--from-dead-letter", "bad name"])
    assert_one_line_error(result, 2, "bad name")
