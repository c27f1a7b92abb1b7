"""The client machine's fast paths agree with the rule they copy, frame by frame.

``ClientConnection.events()`` decodes a subscribed connection's frames and a
publisher's answers on inlined paths; ``publish_answers()`` skips decoding
when a read holds only ``OK`` answers. Each copies the one rule for a single
frame, ``ClientConnection._other_event`` (the original, outside the fast
paths): fed the same seeded random frames, both give the same events, in
order, with the same waiters, and leave the same requests waiting and the
same NOPs to send. The inlined common cases of FIN and RDY write what
:mod:`gnsqlite.protocol.commands` writes.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from gnsqlite.protocol import ClientConnection, ClientState, Delivery, Event, commands
from gnsqlite.protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    MessageFields,
    WireMessage,
    encode_frame,
    encode_message,
)

pytestmark = pytest.mark.no_server

SEEDS = range(40)
OK = encode_frame(FRAME_TYPE_RESPONSE, b"OK")


class Own(Delivery):
    __slots__ = ()


def ready(message_class: type[Delivery] | type[bytes] | None = None) -> ClientConnection:
    machine = ClientConnection(message_class=message_class)
    machine.start({"feature_negotiation": True})
    machine.receive_data(encode_frame(FRAME_TYPE_RESPONSE, json.dumps({}).encode()))
    machine.events()
    assert machine.state is ClientState.READY
    return machine


def subscribed(message_class: type[Delivery] | type[bytes] | None) -> ClientConnection:
    machine = ready(message_class)
    machine.sub("t", "c")
    machine.receive_data(OK)
    machine.events()
    assert machine.state is ClientState.SUBSCRIBED
    return machine


def by_the_original_rule(machine: ClientConnection) -> list[Event]:
    """Every buffered frame through ``_other_event``, one at a time: the rule copied."""
    return [machine._other_event(kind, data) for kind, data in machine._decoder.frames()]


def shape(event: Any) -> tuple[Any, ...]:
    """An event as comparable values, its waiter (compared by identity) included."""
    if isinstance(event, MessageFields):
        return (type(event), event.wire_id, event.body, event.timestamp, event.attempts)
    if type(event) is bytes:  # message_class=bytes: the frame's data
        return (bytes, event)
    fields = getattr(type(event), "__dataclass_fields__", {})
    values = [getattr(event, name) for name in fields if name != "waiter"]
    values = [(type(v), str(v)) if isinstance(v, Exception) else v for v in values]
    return (type(event), *values, id(getattr(event, "waiter", None)))


def assert_agree(
    fast: ClientConnection, slow: ClientConnection, frames: list[bytes], seed: int
) -> None:
    """``frames`` through ``events()`` and through the original rule: the same outcome."""
    data = b"".join(frames)
    fast.receive_data(data)
    slow.receive_data(data)
    got, expected = fast.events(), by_the_original_rule(slow)
    assert [shape(e) for e in got] == [shape(e) for e in expected], f"seed {seed}"
    assert fast.data_to_send() == slow.data_to_send(), f"seed {seed}"
    assert fast.state is slow.state, f"seed {seed}"
    assert fast.pending_requests == slow.pending_requests, f"seed {seed}"


def random_message(rng: random.Random) -> bytes:
    wire = WireMessage(b"%016x" % rng.getrandbits(64), rng.randbytes(rng.randrange(0, 40)), 1, 1)
    return encode_frame(FRAME_TYPE_MESSAGE, encode_message(wire))


@pytest.mark.parametrize("message_class", [None, Own, bytes])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_subscribed_connections_events_follow_the_one_rule(
    seed: int, message_class: type[Delivery] | type[bytes] | None
) -> None:
    rng = random.Random(seed)
    frames = [
        rng.choice(
            [
                random_message(rng),
                random_message(rng),
                encode_frame(FRAME_TYPE_RESPONSE, HEARTBEAT),
                encode_frame(FRAME_TYPE_ERROR, b"E_FIN_FAILED FIN failed"),
                encode_frame(FRAME_TYPE_ERROR, b"E_REQ_FAILED REQ failed"),
            ]
        )
        for _ in range(rng.randrange(1, 30))
    ]
    assert_agree(subscribed(message_class), subscribed(message_class), frames, seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_publishers_answers_follow_the_one_rule(seed: int) -> None:
    rng = random.Random(seed)
    publishes = rng.randrange(1, 20)
    waiters = [object() for _ in range(publishes)]
    names = [rng.choice(["PUB", "MPUB", "DPUB"]) for _ in waiters]
    fast, slow = ready(), ready()
    for machine in (fast, slow):
        for number, (name, waiter) in enumerate(zip(names, waiters, strict=True)):
            machine.publish_encoded(name, commands.pub("t", b"%d" % number), waiter)
    frames: list[bytes] = []
    answers = 0
    while answers < publishes:
        kind = rng.randrange(4)
        if kind == 0:
            frames.append(encode_frame(FRAME_TYPE_RESPONSE, HEARTBEAT))
        elif kind == 1:
            frames.append(encode_frame(FRAME_TYPE_ERROR, b"E_FIN_FAILED FIN failed"))
        else:
            frames.append(OK)
            answers += 1
    assert_agree(fast, slow, frames, seed)
    assert fast.pending_requests == 0, f"seed {seed}"


@pytest.mark.parametrize("seed", SEEDS)
def test_publish_answers_gives_the_waiters_the_rule_gives(seed: int) -> None:
    rng = random.Random(seed)
    publishes = rng.randrange(1, 20)
    waiters = [object() for _ in range(publishes)]
    fast, slow = ready(), ready()
    for machine in (fast, slow):
        for waiter in waiters:
            machine.publish_encoded("PUB", commands.pub("t", b"x"), waiter)
    data = OK * rng.randrange(1, publishes + 1)
    slow.receive_data(data)
    expected = [event.waiter for event in by_the_original_rule(slow)]  # type: ignore[attr-defined]
    assert fast.publish_answers(data) == expected, f"seed {seed}"
    assert fast.pending_requests == slow.pending_requests, f"seed {seed}"


@pytest.mark.parametrize("seed", SEEDS)
def test_fin_and_rdy_write_what_the_command_builders_write(seed: int) -> None:
    rng = random.Random(seed)
    machine = subscribed(None)
    message_id = b"%016x" % rng.getrandbits(64)
    count = rng.randrange(0, 5000)
    assert machine.fin(message_id) == commands.fin(message_id), f"seed {seed}"
    assert machine.rdy(count) == commands.rdy(count), f"seed {seed}"
