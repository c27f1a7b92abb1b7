"""A publisher's connection: the hub reads nsqd's answers, the reader greenlet the rest.

A connection without ``on_message`` parks its reader greenlet and lets the
hub read the socket (``gnsqlite.connection.reader.ConnectionReader._park``): answers resolve their
waiters with no switch to the reader and back. These tests script nsqd
(see ``test_conn_script``) to show the fast path is taken, and that what
is not an answer (a heartbeat, an undecodable frame, a failing waiter,
nsqd hanging up, ``close()``) is handled as the reader always did.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import gevent
import gevent.event
import greenlet
import pytest
from test_conn_script import (
    Peer,
    RecordingSends,
    ScriptedNsqd,
    scripted_servers,
    until_eof,
)

from gnsqlite.connection import Connection
from gnsqlite.consumer import Consumer
from gnsqlite.errors import BrokenConnectionError, ConnectionClosedError, RemoteProtocolError
from gnsqlite.producer import Producer
from gnsqlite.protocol import (
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    Delivery,
    WireMessage,
    encode_frame,
    encode_message,
)
from gnsqlite.testing.waiting import wait_until

HEARTBEAT = encode_frame(FRAME_TYPE_RESPONSE, b"_heartbeat_")
OK = encode_frame(FRAME_TYPE_RESPONSE, b"OK")


@pytest.fixture
def scripted() -> Iterator[Any]:
    with scripted_servers() as start:
        yield start


def answer_all(peer: Peer) -> None:
    while True:
        line, _ = peer.read_command()
        if line.split(b" ")[0] in (b"PUB", b"MPUB", b"DPUB"):
            peer.respond()


def start_producer(server: ScriptedNsqd) -> Producer:
    producer = Producer(server.address, timeout=5.0)
    producer.start()
    assert len(producer.connections) == 1
    return producer


def test_answers_are_read_by_the_hub_without_waking_the_reader_greenlet(scripted: Any) -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        answer_all(peer)

    producer = start_producer(scripted(script))
    try:
        reader = producer.connections[0].reader.greenlet
        producer.publish("t", b"warm-up")
        switched_to: list[Any] = []

        def trace(event: str, args: Any) -> None:
            if event == "switch" and args[1] is reader:
                switched_to.append(args)

        previous = greenlet.settrace(trace)
        try:
            for i in range(20):
                producer.publish("t", b"m%d" % i)
            producer.multi_publish("t", [b"a", b"b"])
            gevent.joinall([gevent.spawn(producer.publish, "t", b"c%d" % i) for i in range(10)])
        finally:
            greenlet.settrace(previous)
        assert switched_to == []
        assert producer.stats()["in_flight"] == 0
    finally:
        producer.close()


@pytest.mark.parametrize("together", [False, True], ids=["before-the-answer", "same-segment"])
def test_a_heartbeat_while_a_publish_waits_is_answered_and_the_publish_succeeds(
    scripted: Any, together: bool
) -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        assert peer.read_command() == (b"PUB t", b"first")
        if together:  # the hub reads both at once: it hands both to the reader, in order
            peer.send(HEARTBEAT + OK)
            assert peer.read_command() == (b"NOP", None)
        else:  # the publish still waits while the reader answers the heartbeat
            peer.send(HEARTBEAT)
            assert peer.read_command() == (b"NOP", None)
            peer.send(OK)
        answer_all(peer)

    server = scripted(script)
    producer = start_producer(server)
    try:
        producer.publish("t", b"first")
        producer.publish("t", b"second")  # the reader parked again: the hub reads this one
        commands = [c for c in server.peers[0].commands if c[0] != b"IDENTIFY"]
        assert commands == [(b"PUB t", b"first"), (b"NOP", None), (b"PUB t", b"second")]
        assert producer.stats()["in_flight"] == 0
    finally:
        producer.close()


def test_an_undecodable_frame_read_by_the_hub_ends_the_connection_typed(scripted: Any) -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        peer.read_command()
        peer.send(struct.pack(">II", 1 << 30, FRAME_TYPE_RESPONSE))  # far above max_frame_size
        until_eof(peer)

    ended: gevent.event.AsyncResult[Exception | None] = gevent.event.AsyncResult()
    conn = Connection(scripted(script).address, on_close=lambda c, e: ended.set(e))
    conn.connect()
    result = conn.publish("t", b"x")
    with pytest.raises(BrokenConnectionError, match="connection lost") as raised:
        result.get(timeout=5)
    assert isinstance(raised.value.__cause__, RemoteProtocolError)
    assert isinstance(ended.get(timeout=5), RemoteProtocolError)
    assert conn.join(1)


def test_a_waiter_that_fails_in_the_hub_ends_the_connection_like_a_reader_bug(
    scripted: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        answer_all(peer)

    class Failing:
        def set(self, value: bytes) -> None:
            raise RuntimeError("waiter bug")

        def set_exception(self, exception: BaseException) -> None:
            pass

    ended: gevent.event.AsyncResult[Exception | None] = gevent.event.AsyncResult()
    conn = Connection(scripted(script).address, on_close=lambda c, e: ended.set(e))
    conn.connect()
    conn.request(Failing(), conn.protocol.pub("t", b"x"))
    later = conn.publish("t", b"y")
    error = ended.get(timeout=5)
    assert isinstance(error, BrokenConnectionError)
    assert "reader failed" in str(error) and "waiter bug" in str(error)
    assert "the reader failed" in caplog.text
    with pytest.raises(BrokenConnectionError):
        later.get(timeout=5)
    assert conn.join(1)


def test_close_while_a_publish_waits_for_the_hub_fails_it_and_stops_the_reads(
    scripted: Any,
) -> None:
    received = gevent.event.Event()

    def script(peer: Peer) -> None:
        peer.handshake()
        peer.read_command()  # never answered
        received.set()
        until_eof(peer)

    conn = Connection(scripted(script).address)
    conn.connect()
    result = conn.publish("t", b"x")
    assert received.wait(5)
    assert conn.reader.watch is not None and conn.reader.watch.active  # the hub reads
    conn.close()
    with pytest.raises(ConnectionClosedError):
        result.get(timeout=5)
    assert not conn.reader.watch.active
    assert conn.join(1)


def test_a_connection_with_on_message_never_parks_its_reader(scripted: Any) -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        answer_all(peer)

    conn = Connection(scripted(script).address, on_message=lambda c, m: None)
    conn.connect()
    try:
        assert conn.publish("t", b"x").get(timeout=5) == b"OK"
        assert conn.reader.watch is None
    finally:
        conn.close()


class Own(Delivery):
    __slots__ = ()


def message_frame(number: int) -> bytes:
    wire = WireMessage(b"%016d" % number, b"body %d" % number, 7, 1)
    return encode_frame(FRAME_TYPE_MESSAGE, encode_message(wire))


def test_a_consumer_connection_with_a_message_class_gets_its_messages_from_the_hub(
    scripted: Any,
) -> None:
    # The reader parks: the hub reads and calls on_message itself, in order;
    # a heartbeat among the messages is still handed to the reader (with what
    # follows it in the same read) and answered.
    nop = gevent.event.Event()

    def script(peer: Peer) -> None:
        peer.handshake()
        assert peer.read_command()[0] == b"SUB t c"
        peer.respond()
        peer.send(message_frame(0) + message_frame(1))
        peer.send(message_frame(2) + HEARTBEAT + message_frame(3))
        line, _ = peer.read_command()
        assert line == b"NOP"
        nop.set()
        until_eof(peer)

    got: list[tuple[Any, bytes, bytes]] = []
    conn = Connection(
        scripted(script).address,
        on_message=lambda c, m: got.append((gevent.getcurrent(), m.wire_id, m.body)),
        message_class=Own,
    )
    conn.connect()
    try:
        conn.subscribe("t", "c", timeout=5)
        wait_until(lambda: len(got) == 4, timeout=5)
        assert nop.wait(5)
        assert [(w, b) for _, w, b in got] == [(b"%016d" % i, b"body %d" % i) for i in range(4)]
        assert all(where is gevent.get_hub() for where, _, _ in got[:3])
        assert conn.reader.watch is not None
    finally:
        conn.close()


def test_a_blocking_publish_cut_short_leaves_the_next_one_sent_at_once(scripted: Any) -> None:
    # A caller blocked in publish() is interrupted (its own gevent.Timeout, a
    # kill); the answer that comes later wakes nobody, and the next caller,
    # alone again, still sends its PUB at once from its own greenlet.
    release = gevent.event.Event()

    def script(peer: Peer) -> None:
        peer.handshake()
        peer.read_command()
        peer.read_command()
        assert release.wait(5)
        peer.respond()  # the two late answers
        peer.respond()
        answer_all(peer)

    server = scripted(script)
    producer = start_producer(server)
    try:
        with pytest.raises(gevent.Timeout), gevent.Timeout(0.1):
            producer.publish("t", b"cut")
        killed = gevent.spawn(producer.publish, "t", b"killed")
        wait_until(lambda: len(server.peers[0].commands) == 3, timeout=5)  # IDENTIFY, 2 PUBs
        killed.kill(block=True)
        release.set()
        wait_until(lambda: producer.stats()["in_flight"] == 0, timeout=5)
        assert (producer._deadlines.blocked, producer._deadlines.resuming) == (0, 0)
        with RecordingSends(producer.connections[0]) as recording:
            producer.publish("t", b"next")
        assert recording.sends == [(gevent.getcurrent(), b"PUB t\n\x00\x00\x00\x04next")]
    finally:
        producer.close()


def test_at_max_in_flight_1_the_handler_sends_its_fin_itself_before_it_yields(
    scripted: Any,
) -> None:
    # The FIN of a connection's last message in flight goes out from the
    # handler's greenlet at once, not from the hub's flush after the handler
    # yields: nsqd gets it while the consumer does its counting. Each message
    # here is sent only after the FIN of the one before it, as nsqd does at RDY 1.
    fins: list[bytes] = []
    subscribed = gevent.event.Event()
    recording_on = gevent.event.Event()
    finished = gevent.event.Event()

    def script(peer: Peer) -> None:
        peer.handshake()
        assert peer.read_command()[0].startswith(b"SUB t c")
        peer.respond()
        subscribed.set()
        while not peer.read_command()[0].startswith(b"RDY"):
            pass
        assert recording_on.wait(5)
        for number in range(3):
            peer.send(message_frame(number))
            line = peer.read_command()[0]
            while not line.startswith(b"FIN"):
                line = peer.read_command()[0]
            fins.append(line)
        finished.set()
        until_eof(peer)

    handlers: list[Any] = []
    consumer = Consumer(
        "t",
        "c",
        lambda message: handlers.append(gevent.getcurrent()),
        nsqd_tcp_addresses=[scripted(script).address],
        max_in_flight=1,
    )
    consumer.start()
    try:
        assert subscribed.wait(5)
        wait_until(lambda: len(consumer.connections) == 1, timeout=5)
        with RecordingSends(consumer.connections[0]) as recording:
            recording_on.set()
            assert finished.wait(5)
        assert fins == [b"FIN %016d" % number for number in range(3)]
        fin_senders = [who for who, data in recording.sends if data.startswith(b"FIN")]
        assert len(fin_senders) == 3 and handlers
        assert all(who is not gevent.get_hub() for who in fin_senders)
        assert set(fin_senders) <= set(handlers)
    finally:
        consumer.close(timeout=5)
