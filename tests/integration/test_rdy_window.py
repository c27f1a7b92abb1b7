"""nsqd's RDY is a window, not a counter, on both brokers (embedded, or real with GNSQLITE_NSQD).

nsqd sends a message while a client's in-flight count is below its RDY
(``IsReadyForMessages`` in nsqd/client_v2.go) and every FIN or REQ reopens
the window; a RDY is never used up. The raw tests prove it byte by byte (the
golden script ``rdy_window`` records the same against the real nsqd); the
consumer tests show what the planner builds on it: a RDY is sent when its
count changes, never again after each answer.
"""

from __future__ import annotations

from collections.abc import Iterator

import gevent
import gevent.socket
import pytest
from recording_proxy import RecordingProxy

from gnsqlite.consumer import Consumer
from gnsqlite.http import NsqdHTTPClient
from gnsqlite.message import Message
from gnsqlite.net import parse_address
from gnsqlite.protocol import (
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    FrameDecoder,
    WireMessage,
    decode_message,
)
from gnsqlite.testing import NsqdServer, wait_until

QUIET = 0.2  # seconds a window that is full must stay silent


class Raw:
    """A subscribed raw connection: it sends only what the test writes."""

    def __init__(self, address: str, topic: str) -> None:
        self.sock = gevent.socket.create_connection(parse_address(address), timeout=5)
        self.decoder = FrameDecoder()
        self.sock.sendall(b"  V2" + b"SUB %s ch\n" % topic.encode())
        assert self.frame() == (FRAME_TYPE_RESPONSE, b"OK")

    def frame(self, timeout: float = 5.0) -> tuple[int, bytes]:
        with gevent.Timeout(timeout):
            while True:
                frame = self.decoder.next_frame()
                if frame == (FRAME_TYPE_RESPONSE, b"_heartbeat_"):
                    self.sock.sendall(b"NOP\n")
                elif frame is not None:
                    return frame
                else:
                    data = self.sock.recv(65536)
                    if not data:
                        raise ConnectionError("nsqd closed the connection")
                    self.decoder.feed(data)

    def message(self) -> WireMessage:
        kind, data = self.frame()
        assert kind == FRAME_TYPE_MESSAGE, (kind, data)
        return decode_message(data)

    def assert_silent(self) -> None:
        """The window is full: no message arrives within QUIET seconds."""
        try:
            frame = self.frame(QUIET)
        except gevent.Timeout:
            return
        raise AssertionError(f"a message beyond the RDY window: {frame!r}")

    def send(self, line: bytes) -> None:
        self.sock.sendall(line + b"\n")

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raws() -> Iterator[list[Raw]]:
    made: list[Raw] = []
    yield made
    for raw in made:
        raw.close()


def publish(server: NsqdServer, topic: str, count: int) -> list[bytes]:
    bodies = [b"%s-%d" % (topic.encode(), i) for i in range(count)]
    NsqdHTTPClient(server.http_address, timeout=10.0).mpub(topic, bodies)
    return bodies


def ready_count(server: NsqdServer, topic: str) -> int:
    (client,) = server.channel_stats(topic, "ch")["clients"]
    return int(client["ready_count"])


def test_one_rdy_1_serves_every_message_as_each_is_finished(
    nsqd: NsqdServer, raws: list[Raw]
) -> None:
    raw = Raw(nsqd.tcp_address, "rdy_window_one")
    raws.append(raw)
    bodies = publish(nsqd, "rdy_window_one", 5)
    raw.send(b"RDY 1")  # once, for all five
    got = []
    for _ in bodies:
        message = raw.message()
        raw.assert_silent()  # one in flight fills RDY 1
        got.append(message.body)
        raw.send(b"FIN " + message.id)  # ... and its FIN reopens the window
    assert sorted(got) == sorted(bodies)
    raw.assert_silent()
    assert ready_count(nsqd, "rdy_window_one") == 1  # never used up, never counted down


def test_rdy_2_is_a_window_of_two_in_flight(nsqd: NsqdServer, raws: list[Raw]) -> None:
    raw = Raw(nsqd.tcp_address, "rdy_window_two")
    raws.append(raw)
    bodies = publish(nsqd, "rdy_window_two", 6)
    raw.send(b"RDY 2")
    held = [raw.message(), raw.message()]
    raw.assert_silent()
    got = [m.body for m in held]
    raw.send(b"FIN " + held.pop(0).id)  # one answer: exactly one more
    held.append(raw.message())
    raw.assert_silent()
    raw.send(b"REQ %s 0" % held.pop(0).id)  # a requeue reopens it too
    held.append(raw.message())
    raw.assert_silent()
    got += [m.body for m in held]
    while held:
        raw.send(b"FIN " + held.pop(0).id)
        message = raw.message()
        if message.body not in got:
            got.append(message.body)
        held.append(message)
        if len(set(got)) == len(bodies):
            break
    assert sorted(set(got)) == sorted(bodies)
    assert ready_count(nsqd, "rdy_window_two") == 2


def _consume(nsqd: NsqdServer, topic: str, max_in_flight: int, count: int) -> list[bytes]:
    """Consume ``count`` messages through a recording proxy; the RDY lines sent meanwhile."""
    bodies = publish(nsqd, topic, count)
    proxy = RecordingProxy(nsqd.tcp_address).start()
    seen: set[bytes] = set()

    def handle(message: Message) -> None:
        seen.add(message.body)

    consumer = Consumer(
        topic, "ch", handle, nsqd_tcp_addresses=proxy.address, max_in_flight=max_in_flight
    )
    try:
        consumer.start()
        wait_until(lambda: len(seen) == len(bodies), timeout=20)
        assert proxy.wait_for(lambda: len(proxy.lines(prefix=b"FIN ")) >= count)
        return proxy.lines(prefix=b"RDY")
    finally:
        consumer.close(timeout=5.0)
        proxy.stop()


def test_at_max_in_flight_1_the_consumer_sends_rdy_1_once(nsqd: NsqdServer) -> None:
    # Before, it sent RDY 1 again with every FIN: 101 RDY for 100 messages.
    assert _consume(nsqd, "rdy_window_consume_1", 1, 100) == [b"RDY 1"]


def test_with_one_nsqd_the_consumer_sends_its_share_once(nsqd: NsqdServer) -> None:
    # RDY 1, then the share its first message opens; answers send nothing more.
    assert _consume(nsqd, "rdy_window_consume_10", 10, 300) == [b"RDY 1", b"RDY 10"]
