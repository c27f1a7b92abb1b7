"""A Connection's reader, writer and handshake over the in-memory stream: the exact bytes.

No sockets: a :class:`~gnsqlite.connection.stream.MemoryStream` is fed what
nsqd would send, and what the connection wrote is read back from it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from typing import Any

import gevent
import gevent.event
import pytest

from gnsqlite.codecs import make_codec
from gnsqlite.config import ConnectionConfig
from gnsqlite.connection import Connection
from gnsqlite.connection.reader import MessageSink, message_sink
from gnsqlite.connection.stream import MemoryStream
from gnsqlite.connection.writer import FLUSH_AT, ConnectionWriter
from gnsqlite.errors import BadTopicError, BrokenConnectionError, FinFailedError, InvalidError
from gnsqlite.protocol import MAGIC_V2, ClientState, WireMessage
from gnsqlite.protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    encode_frame,
    encode_message,
)
from gnsqlite.testing import wait_until

pytestmark = pytest.mark.no_server

CONFIG: dict[str, Any] = {"client_id": "c", "hostname": "h", "heartbeat_interval": 30.0}
OK = encode_frame(FRAME_TYPE_RESPONSE, b"OK")
HEARTBEAT = encode_frame(FRAME_TYPE_RESPONSE, b"_heartbeat_")


def identify_reply(**features: Any) -> bytes:
    body = {"max_rdy_count": 2500, "msg_timeout": 60000, "max_msg_timeout": 900000}
    return encode_frame(FRAME_TYPE_RESPONSE, json.dumps({**body, **features}).encode())


def identify_command(data: bytes) -> tuple[dict[str, Any], bytes]:
    """The IDENTIFY body at the start of ``data`` (after the magic), and the bytes after it."""
    head = MAGIC_V2 + b"IDENTIFY\n"
    assert data.startswith(head), data[:32]
    (size,) = struct.unpack(">I", data[len(head) : len(head) + 4])
    start = len(head) + 4
    return json.loads(data[start : start + size]), data[start + size :]


def written(stream: MemoryStream, expected: bytes) -> bytes:
    """Wait until the connection wrote ``expected`` (its length at least); return what it wrote."""
    got = bytearray()

    def enough() -> bool:
        got.extend(stream.take_written())
        return len(got) >= len(expected)

    wait_until(enough, timeout=5, message=f"the connection to write {expected!r}")
    return bytes(got)


@pytest.fixture
def connected() -> Iterator[tuple[Connection, MemoryStream, list[Any]]]:
    """A connection past IDENTIFY over a memory stream, collecting what its callbacks get."""
    stream = MemoryStream()
    seen: list[Any] = []
    conn = Connection(
        "127.0.0.1:4150",
        ConnectionConfig(**CONFIG),
        on_message=lambda c, m: seen.append(("message", c, m)),
        on_error=lambda c, e: seen.append(("error", c, e)),
        connect_stream=lambda address: stream,
    )
    stream.feed(identify_reply())
    conn.connect()
    stream.take_written()  # the magic and IDENTIFY
    try:
        yield conn, stream, seen
    finally:
        if conn.protocol.state is ClientState.SUBSCRIBED:
            close_subscribed(conn, stream)
        conn.close(1.0)


def close_subscribed(conn: Connection, stream: MemoryStream) -> None:
    """Close a subscribed connection: it writes CLS, nsqd answers CLOSE_WAIT."""
    stream.take_written()  # what the test left unread
    closing = gevent.spawn(conn.close, 5.0)
    assert written(stream, b"CLS\n") == b"CLS\n"
    stream.feed(encode_frame(FRAME_TYPE_RESPONSE, b"CLOSE_WAIT"))
    closing.get(timeout=5)
    assert conn.closed and stream.closed


def subscribe(conn: Connection, stream: MemoryStream) -> None:
    result = gevent.spawn(conn.subscribe, "t", "c", 5)
    assert written(stream, b"SUB t c\n") == b"SUB t c\n"
    stream.feed(OK)
    result.get(timeout=5)


def test_a_heartbeat_is_answered_with_nop(
    connected: tuple[Connection, MemoryStream, list[Any]],
) -> None:
    _, stream, _ = connected
    stream.feed(HEARTBEAT)
    assert written(stream, b"NOP\n") == b"NOP\n"


def test_a_response_goes_to_the_waiting_caller_in_request_order(
    connected: tuple[Connection, MemoryStream, list[Any]],
) -> None:
    conn, stream, _ = connected
    first = conn.publish("t", b"one")
    second = conn.publish("t", b"two")
    expected = b"PUB t\n\x00\x00\x00\x03one" + b"PUB t\n\x00\x00\x00\x03two"
    assert written(stream, expected) == expected  # both in one flush
    stream.feed(OK + encode_frame(FRAME_TYPE_ERROR, b"E_BAD_TOPIC bad"))
    assert first.get(timeout=5) == b"OK"
    with pytest.raises(BadTopicError):
        second.get(timeout=5)


def test_a_non_fatal_error_frame_goes_to_on_error_and_the_connection_stays(
    connected: tuple[Connection, MemoryStream, list[Any]],
) -> None:
    conn, stream, seen = connected
    subscribe(conn, stream)
    stream.feed(encode_frame(FRAME_TYPE_ERROR, b"E_FIN_FAILED FIN 0123 failed"))
    wait_until(lambda: seen, timeout=5)
    (kind, who, error), *_ = seen
    assert (kind, who) == ("error", conn) and isinstance(error, FinFailedError)
    assert not conn.closed


def test_a_fatal_error_frame_ends_the_connection_and_fails_waiting_requests(
    connected: tuple[Connection, MemoryStream, list[Any]],
) -> None:
    conn, stream, _ = connected
    stream.feed(encode_frame(FRAME_TYPE_ERROR, b"E_INVALID something broke"))
    pending = conn.publish("t", b"x")
    wait_until(lambda: conn.closed, timeout=5)
    assert isinstance(conn.error, InvalidError)
    assert stream.closed
    with pytest.raises(InvalidError):  # the error answers the request it arrived for
        pending.get(timeout=5)


def test_a_message_is_handed_to_on_message_and_its_fin_written(
    connected: tuple[Connection, MemoryStream, list[Any]],
) -> None:
    conn, stream, seen = connected
    subscribe(conn, stream)
    conn.ready(1)
    assert written(stream, b"RDY 1\n") == b"RDY 1\n"
    wire = WireMessage(b"0123456789abcdef", b"body", 1_700_000_000_000_000_000, 1)
    stream.feed(encode_frame(FRAME_TYPE_MESSAGE, encode_message(wire)))
    wait_until(lambda: seen, timeout=5)
    (kind, who, message), *_ = seen
    assert (kind, who) == ("message", conn)
    assert (message.id, message.body, message.attempts) == (wire.id, b"body", 1)
    conn.finish(message.id)
    assert written(stream, b"FIN 0123456789abcdef\n") == b"FIN 0123456789abcdef\n"


class Sink(MessageSink):
    def __init__(self) -> None:
        self.got: list[tuple[Any, Any]] = []

    def on_message(self, conn: Any, message: Any) -> None:
        self.got.append((conn, message))

    def elsewhere(self, conn: Any, message: Any) -> None:
        raise AssertionError("not the sink's on_message")


def test_a_sinks_own_on_message_is_called_as_the_sink_and_any_other_callable_as_given() -> None:
    sink = Sink()
    assert message_sink(sink.on_message) is sink
    # Not its on_message, or not a sink's: called as the callable it is.
    assert message_sink(sink.elsewhere) is None
    assert message_sink(lambda conn, message: None) is None
    assert message_sink(None) is None
    stream = MemoryStream()
    conn = Connection(
        "127.0.0.1:4150",
        ConnectionConfig(**CONFIG),
        on_message=sink.on_message,
        connect_stream=lambda address: stream,
    )
    stream.feed(identify_reply())
    conn.connect()
    stream.take_written()  # the magic and IDENTIFY
    try:
        subscribe(conn, stream)
        wire = WireMessage(b"0123456789abcdef", b"body", 1_700_000_000_000_000_000, 3)
        stream.feed(encode_frame(FRAME_TYPE_MESSAGE, encode_message(wire)) * 2)
        wait_until(lambda: len(sink.got) == 2, timeout=5)
        (who, message), _ = sink.got
        assert who is conn
        assert (message.id, message.body, message.attempts) == (wire.id, b"body", 3)
        close_subscribed(conn, stream)
    finally:
        conn.close(1.0)


def test_commands_queued_in_one_turn_go_out_in_one_send(
    connected: tuple[Connection, MemoryStream, list[Any]],
) -> None:
    conn, stream, _ = connected
    subscribe(conn, stream)
    ids = [b"%016d" % i for i in range(5)]
    for message_id in ids:
        conn.finish(message_id)
    conn.ready(5)
    assert stream.sends == []  # queued for the hub's one flush
    expected = b"".join(b"FIN %s\n" % i for i in ids) + b"RDY 5\n"
    wait_until(lambda: stream.sends, timeout=5)
    assert stream.sends == [expected]


def test_a_writer_binds_its_flush_once_and_lets_it_go_when_stopped() -> None:
    # Bound once at start (not a method object per scheduled flush); the bound method
    # holds the writer, so stop() drops it: no cycle is left for the collector.
    writer = ConnectionWriter("127.0.0.1:4150", lambda error: None)
    stream = MemoryStream()
    writer.start(stream, None)
    for _ in range(2):  # two turns, two scheduled flushes
        writer.queue(b"NOP\n")
        wait_until(lambda: not writer.flush_scheduled, timeout=5)
    assert stream.sends == [b"NOP\n", b"NOP\n"]
    writer.stop()
    assert getattr(writer._flush_soon, "__self__", None) is not writer
    writer.queue(b"NOP\n")  # a stopped writer sends nothing more
    gevent.sleep(0)
    assert stream.sends == [b"NOP\n", b"NOP\n"]


def test_what_a_flush_cannot_send_goes_out_first_from_the_writer() -> None:
    stream = MemoryStream(send_limit=4)
    conn = Connection(
        "127.0.0.1:4150", ConnectionConfig(**CONFIG), connect_stream=lambda address: stream
    )
    stream.feed(identify_reply())
    conn.connect()
    try:
        stream.sends.clear()
        conn.publish("t", b"x")
        conn.nop()
        expected = b"PUB t\n\x00\x00\x00\x01x" + b"NOP\n"
        wait_until(lambda: len(b"".join(stream.sends)) >= len(expected), timeout=5)
        assert stream.sends == [expected[:4], expected[4:]]  # the flush's part, then the rest
    finally:
        conn.close(1.0)


def test_nsqd_hanging_up_ends_the_connection_with_a_broken_connection_error(
    connected: tuple[Connection, MemoryStream, list[Any]],
) -> None:
    conn, stream, _ = connected
    pending = conn.publish("t", b"x")
    stream.feed_eof()
    with pytest.raises(BrokenConnectionError, match="nsqd closed the connection"):
        pending.get(timeout=5)
    assert conn.closed


def test_the_handshake_transcript_magic_identify_tls_snappy_auth() -> None:
    stream = MemoryStream()
    config = ConnectionConfig(**CONFIG, tls_v1=True, snappy=True, auth_secret="s3cret")
    conn = Connection("127.0.0.1:4150", config, connect_stream=lambda address: stream)
    nsqd_out = make_codec("snappy")  # what nsqd compresses
    nsqd_in = make_codec("snappy")  # what nsqd decompresses
    connecting = gevent.spawn(conn.connect)
    body, rest = identify_command(written(stream, MAGIC_V2 + b"IDENTIFY\n"))
    assert rest == b""
    assert {k: body[k] for k in ("client_id", "hostname", "tls_v1", "snappy", "deflate")} == {
        "client_id": "c",
        "hostname": "h",
        "tls_v1": True,
        "snappy": True,
        "deflate": False,
    }
    assert body["feature_negotiation"] is True and body["heartbeat_interval"] == 30000
    stream.feed(identify_reply(tls_v1=True, snappy=True, auth_required=True))
    wait_until(lambda: stream.tls, timeout=5)  # TLS first, then nsqd's OK over it
    assert stream.tls_hostname == "127.0.0.1"
    assert stream.take_written() == b""  # nothing written between IDENTIFY and TLS
    stream.feed(OK)
    stream.feed(nsqd_out.encode(OK))  # snappy's OK, compressed
    auth = nsqd_in.decode(written(stream, b"AUTH\n\x00\x00\x00\x06s3cret"))
    assert auth == b"AUTH\n\x00\x00\x00\x06s3cret"
    reply = {"identity": "me", "permission_count": 1}
    stream.feed(nsqd_out.encode(encode_frame(FRAME_TYPE_RESPONSE, json.dumps(reply).encode())))
    features = connecting.get(timeout=5)
    try:
        assert features["snappy"] is True and features["auth_required"] is True
        assert conn.tls and conn.compression == "snappy" and conn.identity == reply
        conn.nop()  # and from now on, every command compressed
        assert nsqd_in.decode(written(stream, b"x")) == b"NOP\n"
    finally:
        conn.close(1.0)


@pytest.mark.parametrize("now", [False, True])
@pytest.mark.parametrize("tls", [False, True])
@pytest.mark.parametrize("scheduled", [False, True])
@pytest.mark.parametrize("queued_before", [0, FLUSH_AT - 2, FLUSH_AT - 1])
def test_finish_queues_a_fin_by_the_writers_own_rule(
    now: bool, tls: bool, scheduled: bool, queued_before: int
) -> None:
    # Connection.finish inlines ConnectionWriter.queue (one FIN per message): both must
    # leave the same outbox and ask the writer to send in the same cases.
    class Recording(ConnectionWriter):  # a subclass: the compiled build's writer takes no patch
        def __init__(self, name: str) -> None:
            super().__init__(name, lambda error: None)
            self.asked: list[bool] = []

        def queued(self, now: bool = False) -> None:
            self.asked.append(now)

    def prepared(conn: Connection) -> list[bool]:
        writer = conn.writer = Recording(conn.name)
        writer.tls, writer.flush_scheduled = tls, scheduled
        writer.outbox[:] = [b"NOP\n"] * queued_before
        return writer.asked

    by_finish, by_queue = Connection("127.0.0.1:4150"), Connection("127.0.0.1:4150")
    by_finish._usable = True
    by_finish.protocol.state = ClientState.SUBSCRIBED
    asked_by_finish, asked_by_queue = prepared(by_finish), prepared(by_queue)
    by_finish.finish(b"0123456789abcdef", now)
    by_queue.writer.queue(b"FIN 0123456789abcdef\n", now)
    assert asked_by_finish == asked_by_queue
    assert by_finish.writer.outbox == by_queue.writer.outbox
