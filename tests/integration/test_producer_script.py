"""Producer against scripted nsqd: retries, failover, limits and lifecycle, exactly.

The scripted servers (see ``test_conn_script``) let a test decide when a
connection dies and what nsqd answers, and record every command received.
"""

from __future__ import annotations

import array
import gc
import socket
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import gevent
import gevent.event
import pytest
from test_conn_script import Peer, RecordingSends, Script, ScriptedNsqd, scripted_servers

from gnsqlite.errors import (
    BadMessageError,
    ConfigError,
    ConnectionClosedError,
    InvalidNameError,
    LocalProtocolError,
    MessageTooLargeError,
    NoConnectionsError,
    NSQTimeoutError,
)
from gnsqlite.producer import Producer
from gnsqlite.protocol import FRAME_TYPE_RESPONSE
from gnsqlite.protocol.frames import encode_frame
from gnsqlite.testing.waiting import wait_until
from gnsqlite.timers import TimerWheel

Start = Callable[[Script], ScriptedNsqd]


@pytest.fixture
def scripted() -> Iterator[Start]:
    with scripted_servers() as start:
        yield start


def answer_all(peer: Peer) -> None:
    peer.handshake()
    while True:
        line, _ = peer.read_command()
        if line.split(b" ")[0] in (b"PUB", b"MPUB", b"DPUB"):
            peer.respond()


def free_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def published(server: ScriptedNsqd) -> list[tuple[bytes, bytes | None]]:
    return [c for p in server.peers for c in p.commands if c[0].split(b" ")[0] != b"IDENTIFY"]


def live_greenlets() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, gevent.Greenlet) and not o.dead)


def test_constructor_opens_nothing_and_validates(scripted: Start) -> None:
    server = scripted(answer_all)
    before = live_greenlets()
    producer = Producer([server.address], heartbeat_interval=5.0)
    assert live_greenlets() == before
    assert server.peers == []
    assert producer.connections == ()
    with pytest.raises(ConnectionClosedError, match="start"):
        producer.publish("t", b"x")
    with pytest.raises(ConfigError, match="heartbeat_interva"):
        Producer([server.address], heartbeat_intervall=5.0)
    with pytest.raises(ConfigError, match="host:port"):
        Producer(["nonsense"])
    with pytest.raises(ConfigError, match="empty"):
        Producer([])


def test_bodies_are_bytes_or_utf8_str_and_nothing_else(scripted: Start) -> None:
    server = scripted(answer_all)
    with Producer(server.address) as producer:
        producer.publish("t", "héllo")
        producer.publish("t", b"raw")
        producer.multi_publish("t", ["a", b"b"])
        with pytest.raises(TypeError, match="int"):
            producer.publish("t", 42)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            producer.multi_publish("t", b"not a list")  # type: ignore[arg-type]  # wrong type on purpose
        with pytest.raises(TypeError, match="NoneType"):
            producer.multi_publish("t", [b"a", None])  # type: ignore[list-item]
    assert published(server) == [
        (b"PUB t", "héllo".encode()),
        (b"PUB t", b"raw"),
        (b"MPUB t", b"\x00\x00\x00\x02\x00\x00\x00\x01a\x00\x00\x00\x01b"),
    ]


def test_multi_publish_frames_every_kind_of_body_by_its_byte_size(scripted: Start) -> None:
    """Lists of bytes are joined as they are; any other body is converted first.

    A ``memoryview`` of 4-byte items has ``len`` 2 but 8 bytes, and a ``str``
    of one character may be two bytes: each is framed by its size in bytes.
    """
    server = scripted(answer_all)
    wide = memoryview(array.array("i", [1, 2]))
    with Producer(server.address) as producer:
        producer.multi_publish("t", [b"ab", b"cd"])  # the usual call
        producer.multi_publish("t", [wide, b"cd"])
        producer.multi_publish("t", ["é", bytearray(b"xy")])
        producer.multi_publish("t", (b for b in [b"a", b"bc"]))
    count = size = struct.Struct(">I").pack
    assert [body for _, body in published(server)] == [
        count(2) + size(2) + b"ab" + size(2) + b"cd",
        count(2) + size(8) + wide.tobytes() + size(2) + b"cd",
        count(2) + size(2) + "é".encode() + size(2) + b"xy",
        count(2) + size(1) + b"a" + size(2) + b"bc",
    ]


def test_dpub_sends_the_delay_in_milliseconds(scripted: Start) -> None:
    server = scripted(answer_all)
    with Producer(server.address) as producer:
        producer.publish("t", b"later", defer=1.5)
        with pytest.raises(LocalProtocolError, match="defer"):
            producer.publish("t", b"x", defer=-1)
    assert published(server) == [(b"DPUB t 1500", b"later")]


def test_limits_are_checked_before_sending(scripted: Start) -> None:
    server = scripted(answer_all)
    with Producer(server.address, max_message_size=10, max_body_size=30) as producer:
        with pytest.raises(MessageTooLargeError, match=r"11 bytes.*max_message_size=10"):
            producer.publish("t", b"x" * 11)
        with pytest.raises(MessageTooLargeError, match="max_message_size=10"):
            producer.multi_publish("t", [b"a", b"x" * 11])
        # 4 (count) + 3 * (4 + 6) = 34 bytes > 30
        with pytest.raises(MessageTooLargeError, match=r"34 bytes.*max_body_size=30"):
            producer.multi_publish("t", [b"123456"] * 3)
        with pytest.raises(LocalProtocolError, match="empty"):
            producer.publish("t", b"")
        with pytest.raises(LocalProtocolError, match="at least one"):
            producer.multi_publish("t", [])
        with pytest.raises(InvalidNameError, match="bad topic"):
            producer.publish("bad topic", b"x")
        producer.publish("t", b"x" * 10)  # exactly at the limit is fine
        producer.multi_publish("t", [b"12345", b"1", b"1"])  # 4 + 9 + 5 + 5 = 23 bytes
    assert [c[0] for c in published(server)] == [b"PUB t", b"MPUB t"]


def test_a_publish_whose_connection_dies_is_retried_on_another(scripted: Start) -> None:
    hung_up = gevent.event.Event()

    def dies_on_pub(peer: Peer) -> None:
        peer.handshake()
        peer.read_command()
        hung_up.set()  # returning closes the socket: the PUB is never answered

    flaky = scripted(dies_on_pub)
    good = scripted(answer_all)
    producer = Producer([flaky.address, good.address], reconnect_interval=0.05)
    producer.start()
    try:
        wait_until(lambda: len(producer.connections) == 2)
        for i in range(4):
            producer.publish("t", b"m%d" % i)
        assert hung_up.is_set()
        # Every message reached the good server once (the flaky one answered none).
        bodies = [body for _, body in published(good)]
        assert None not in bodies, bodies  # PUBs only, each with its body
        assert sorted(b for b in bodies if b is not None) == [b"m0", b"m1", b"m2", b"m3"]
        # The flaky nsqd is reconnected in the background.
        wait_until(lambda: len(flaky.peers) >= 2)
    finally:
        producer.close()


def test_requests_are_spread_over_the_connections(scripted: Start) -> None:
    a, b = scripted(answer_all), scripted(answer_all)
    with Producer([a.address, b.address]) as producer:
        wait_until(lambda: len(producer.connections) == 2)
        for _ in range(10):
            producer.publish("t", b"x")
    assert len(published(a)) == 5
    assert len(published(b)) == 5


def test_when_every_nsqd_fails_the_error_names_each_address(scripted: Start) -> None:
    first, second = free_address(), free_address()
    producer = Producer([first, second], timeout=0.5, reconnect_interval=0.05)
    producer.start()
    try:
        started = time.monotonic()
        with pytest.raises(NoConnectionsError) as info:
            producer.publish("t", b"x")
        assert time.monotonic() - started < 2
        assert set(info.value.errors) == {first, second}
        assert first in str(info.value) and second in str(info.value)
        assert all(isinstance(e, ConnectionError) for e in info.value.errors.values())
    finally:
        producer.close()


def test_a_server_error_is_raised_not_retried(scripted: Start) -> None:
    def refuses(peer: Peer) -> None:
        peer.handshake()
        peer.read_command()
        peer.error(b"E_BAD_MESSAGE PUB message too big 20 > 10")

    server = scripted(refuses)
    with Producer(server.address) as producer, pytest.raises(BadMessageError, match="too big"):
        producer.publish("t", b"x" * 20)
    assert len(published(server)) == 1


def test_a_publish_waits_for_a_reconnect_within_its_timeout(scripted: Start) -> None:
    address = free_address()
    host, port = address.split(":")
    producer = Producer(address, reconnect_interval=0.05, max_reconnect_interval=0.1)
    producer.start(timeout=0.2)
    try:
        result = producer.publish_async("t", b"x", timeout=5)
        server = ScriptedNsqd(answer_all)
        server.server = type(server.server)((host, int(port)), server._handle)
        server.server.start()
        try:
            assert result.get(timeout=5) == b"OK"
        finally:
            server.server.stop(timeout=1)
    finally:
        producer.close()


def test_close_fails_waiting_publishes_and_leaves_no_greenlet(scripted: Start) -> None:
    def never_answers(peer: Peer) -> None:
        peer.handshake()
        while True:
            peer.read_command()

    before = live_greenlets()
    server = scripted(never_answers)
    producer = Producer(server.address)
    producer.start()
    result = producer.publish_async("t", b"x")
    wait_until(lambda: len(published(server)) == 1)
    conns = list(producer.connections)
    producer.close()
    with pytest.raises(ConnectionClosedError):
        result.get(timeout=1)
    assert producer.join(1)
    assert all(c.join(0) for c in conns)
    wait_until(lambda: live_greenlets() <= before + 1)  # + the server's handler
    producer.close()  # twice is fine
    with pytest.raises(ConnectionClosedError):
        producer.publish("t", b"x")


def test_a_blocking_publish_nsqd_never_answers_times_out_on_its_own_timeout(
    scripted: Start,
) -> None:
    def never_answers(peer: Peer) -> None:
        peer.handshake()
        while True:
            peer.read_command()

    server = scripted(never_answers)
    with Producer(server.address, timeout=30) as producer:
        outcomes: dict[str, tuple[type[BaseException], float]] = {}

        def publish(name: str, timeout: float) -> None:
            started = time.monotonic()
            try:
                producer.publish("t", name.encode(), timeout=timeout)
            except NSQTimeoutError as exc:
                assert f"within {timeout} s" in str(exc)
                outcomes[name] = (type(exc), time.monotonic() - started)

        # The longer wait starts first: the shorter one must not wait behind it.
        slow = gevent.spawn(publish, "slow", 1.5)
        gevent.sleep(0.05)
        fast = gevent.spawn(publish, "fast", 0.3)
        gevent.joinall([slow, fast], timeout=5, raise_error=True)
        assert outcomes["fast"][0] is NSQTimeoutError
        assert 0.3 <= outcomes["fast"][1] < 1.0
        assert outcomes["slow"][0] is NSQTimeoutError
        assert 1.5 <= outcomes["slow"][1] < 2.5
        assert len(published(server)) == 2
        wheel = TimerWheel.for_hub()
        assert [t for t in wheel.owned_by(producer) if t.active] == []  # nothing left to time


def test_concurrent_publishers_on_one_connection(scripted: Start) -> None:
    server = scripted(answer_all)
    with Producer(server.address) as producer:
        results: list[Any] = []

        def publisher(i: int) -> None:
            producer.publish("t", b"%d" % i)
            results.append(i)

        gevent.joinall([gevent.spawn(publisher, i) for i in range(100)], raise_error=True)
    assert sorted(results) == list(range(100))
    assert sorted(int(b or b"") for _, b in published(server)) == list(range(100))
    assert len(server.peers) == 1


def test_close_cancels_reconnects_and_parked_publishes() -> None:
    producer = Producer(free_address(), reconnect_interval=5.0)
    producer.start(timeout=1)
    result = producer.publish_async("t", b"x", timeout=30)  # parked: no nsqd is up
    wheel = TimerWheel.for_hub()
    assert len(wheel.owned_by(producer)) == 2  # the reconnect and the park's deadline
    producer.close()
    assert wheel.owned_by(producer) == []
    with pytest.raises(ConnectionClosedError, match="producer closed"):
        result.get(timeout=1)
    assert producer.join(0)


def test_a_blocking_publish_is_sent_by_its_caller_before_it_waits(scripted: Start) -> None:
    # One publish at a time: the PUB leaves from the caller's greenlet at
    # once (nsqd works while the caller sets up its wait), not from the hub.
    with (
        Producer(scripted(answer_all).address) as producer,
        RecordingSends(producer.connections[0]) as recording,
    ):

        def publish_three() -> None:
            for i in range(3):
                producer.publish("t", b"%d" % i)

        publisher = gevent.spawn(publish_three)
        publisher.get(timeout=5)
        assert recording.sends == [(publisher, b"PUB t\n\x00\x00\x00\x01%d" % i) for i in range(3)]


def test_publishers_woken_together_send_their_next_publishes_in_one_batch(
    scripted: Start,
) -> None:
    # 10 greenlets publish through one producer; nsqd answers each round of 10
    # in one segment. Only the first publish, with no other caller blocked,
    # is sent at once; the others, and those woken by the same answers,
    # leave their sends to one batch.
    def script(peer: Peer) -> None:
        peer.handshake()
        while True:
            for _ in range(10):
                peer.read_command()
            peer.send(encode_frame(FRAME_TYPE_RESPONSE, b"OK") * 10)

    with (
        Producer(scripted(script).address) as producer,
        RecordingSends(producer.connections[0]) as recording,
    ):

        def publish_four() -> None:
            for _ in range(4):
                producer.publish("t", b"x")

        publishers = [gevent.spawn(publish_four) for _ in range(10)]
        gevent.joinall(publishers, timeout=10, raise_error=True)
        pubs_per_send = [data.count(b"PUB t\n") for _, data in recording.sends]
        # the first round: the first alone, the 9 that follow it together
        assert pubs_per_send == [1, 9, 10, 10, 10]


def test_an_async_publish_that_failed_before_its_result_was_asked_for_holds_the_error() -> None:
    # A blocking caller never makes the AsyncResult; publish_async makes it
    # after the attempt may already have ended (here: no nsqd, no time left).
    producer = Producer(free_address(), reconnect_interval=5.0)
    producer.start(timeout=1)
    try:
        result = producer.publish_async("t", b"x", timeout=0)
        assert result.ready()
        with pytest.raises(NoConnectionsError):
            result.get(block=False)
        with pytest.raises(NoConnectionsError):
            producer.publish("t", b"x", timeout=0)
        assert producer.stats()["in_flight"] == 0
    finally:
        producer.close()


def test_an_async_publish_resolves_to_ok_when_answered(scripted: Start) -> None:
    with Producer(scripted(answer_all).address) as producer:
        results = [producer.publish_async("t", b"%d" % i) for i in range(5)]
        assert [r.get(timeout=5) for r in results] == [b"OK"] * 5
        producer.publish("t", b"sync")  # the attempt that made no AsyncResult
