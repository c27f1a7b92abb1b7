"""Connection against a scripted nsqd: exact bytes, odd timings, failure paths.

Each test runs a tiny server (a gevent StreamServer on a free port) whose
handler plays one nsqd script: it reads the client's commands and answers
with hand-made frames. That makes the cases a real nsqd rarely produces
repeatable: distinct answers to pipelined requests (to prove the matching),
an IDENTIFY reply and the compressed ``OK`` arriving in one segment, a
server that goes silent, a plain ``OK`` to IDENTIFY, refused AUTH.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import struct
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import gevent
import gevent.event
import gevent.server
import gevent.socket
import pytest

import gnsqlite
from gnsqlite.codecs import Codec, make_codec
from gnsqlite.config import ConnectionConfig
from gnsqlite.connection import Connection
from gnsqlite.errors import (
    BadTopicError,
    BrokenConnectionError,
    ConnectionClosedError,
    NegotiationError,
    NSQTimeoutError,
    RemoteProtocolError,
    UnauthorizedError,
)
from gnsqlite.protocol import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE
from gnsqlite.protocol.frames import WireMessage, encode_frame, encode_message
from gnsqlite.testing.waiting import wait_until

_BODY_COMMANDS = {b"IDENTIFY", b"AUTH", b"PUB", b"MPUB", b"DPUB"}


class Peer:
    """The server side of one scripted connection."""

    def __init__(self, sock: gevent.socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.codec: Codec | None = None
        self.commands: list[tuple[bytes, bytes | None]] = []

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        if self.codec is not None:
            data = self.codec.decode(data)
        self.buf += data

    def read_exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def read_command(self) -> tuple[bytes, bytes | None]:
        while b"\n" not in self.buf:
            self._fill()
        end = self.buf.index(b"\n")
        line = bytes(self.buf[:end])
        del self.buf[: end + 1]
        body = None
        if line.split(b" ", 1)[0] in _BODY_COMMANDS:
            (size,) = struct.unpack(">I", self.read_exact(4))
            body = self.read_exact(size)
        self.commands.append((line, body))
        return line, body

    def handshake(self, reply: dict[str, Any] | bytes | None = None) -> dict[str, Any]:
        """Read the magic and IDENTIFY; answer ``reply`` (default: features as asked)."""
        assert self.read_exact(4) == b"  V2"
        line, body = self.read_command()
        assert line == b"IDENTIFY"
        assert body is not None
        identify: dict[str, Any] = json.loads(body)
        if reply is None:
            reply = {"max_rdy_count": 2500, "msg_timeout": 60000, "max_msg_timeout": 900000}
        data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
        self.send(encode_frame(FRAME_TYPE_RESPONSE, data))
        return identify

    def frame(self, frame_type: int, data: bytes) -> bytes:
        return encode_frame(frame_type, data)

    def send(self, data: bytes) -> None:
        if self.codec is not None:
            data = self.codec.encode(data)
        self.sock.sendall(data)

    def respond(self, data: bytes = b"OK") -> None:
        self.send(encode_frame(FRAME_TYPE_RESPONSE, data))

    def error(self, text: bytes) -> None:
        self.send(encode_frame(FRAME_TYPE_ERROR, text))


Script = Callable[[Peer], None]


class ScriptedNsqd:
    """Runs ``script(peer)`` for each connection; records what went wrong in it."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.peers: list[Peer] = []
        self.failures: list[BaseException] = []
        self.done = gevent.event.Event()
        self.server = gevent.server.StreamServer(("127.0.0.1", 0), self._handle)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_port}"

    def _handle(self, sock: gevent.socket.socket, _addr: object) -> None:
        peer = Peer(sock)
        self.peers.append(peer)
        try:
            self.script(peer)
        except EOFError:
            pass
        except BaseException as exc:
            self.failures.append(exc)
            raise
        finally:
            self.done.set()
            sock.close()


@contextlib.contextmanager
def scripted_servers() -> Iterator[Callable[[Script], ScriptedNsqd]]:
    """Start scripted servers; on exit stop them and re-raise what failed in a script."""
    servers: list[ScriptedNsqd] = []

    def start(script: Script) -> ScriptedNsqd:
        server = ScriptedNsqd(script)
        server.server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.server.stop(timeout=1)
        assert not server.failures, server.failures


@pytest.fixture
def scripted() -> Iterator[Callable[[Script], ScriptedNsqd]]:
    with scripted_servers() as start:
        yield start


def until_eof(peer: Peer) -> None:
    """Read commands until the client hangs up; answer CLS like nsqd."""
    while True:
        if peer.read_command()[0] == b"CLS":
            peer.respond(b"CLOSE_WAIT")


def ignore_all(peer: Peer) -> None:
    """Read commands until the client hangs up; answer nothing."""
    while True:
        peer.read_command()


def test_identify_sends_every_option_and_keeps_the_negotiated_values(scripted: Any) -> None:
    seen: dict[str, Any] = {}

    def script(peer: Peer) -> None:
        seen.update(
            peer.handshake(
                {"max_rdy_count": 123, "msg_timeout": 5000, "max_msg_timeout": 7000, "v": 1}
            )
        )
        until_eof(peer)

    server = scripted(script)
    config = ConnectionConfig(
        client_id="cid",
        hostname="host.example",
        heartbeat_interval=12.5,
        output_buffer_size=4096,
        output_buffer_timeout=0.05,
        sample_rate=7,
        msg_timeout=30.0,
        deflate_level=3,
    )
    conn = Connection(server.address, config)
    features = conn.connect()
    try:
        assert seen == {
            "client_id": "cid",
            "hostname": "host.example",
            "feature_negotiation": True,
            "heartbeat_interval": 12500,
            "output_buffer_size": 4096,
            "output_buffer_timeout": 50,
            "tls_v1": False,
            "snappy": False,
            "deflate": False,
            "deflate_level": 3,
            "sample_rate": 7,
            "user_agent": f"gnsqlite/{gnsqlite.__version__}",
            "msg_timeout": 30000,
        }
        assert features["v"] == 1
        assert conn.max_rdy_count == 123
        assert conn.msg_timeout == 5.0
        assert conn.max_msg_timeout == 7.0
    finally:
        conn.close()


def test_disabled_features_are_sent_as_minus_one(scripted: Any) -> None:
    seen: dict[str, Any] = {}

    def script(peer: Peer) -> None:
        seen.update(peer.handshake())
        until_eof(peer)

    server = scripted(script)
    config = ConnectionConfig(
        heartbeat_interval=None, output_buffer_size=None, output_buffer_timeout=None
    )
    conn = Connection(server.address, config)
    conn.connect()
    conn.close()
    assert seen["heartbeat_interval"] == -1
    assert seen["output_buffer_size"] == -1
    assert seen["output_buffer_timeout"] == -1
    assert "msg_timeout" not in seen  # nsqd's own default applies


def test_a_plain_ok_to_identify_means_defaults(scripted: Any) -> None:
    def script(peer: Peer) -> None:
        peer.handshake(b"OK")
        until_eof(peer)

    conn = Connection(scripted(script).address)
    conn.connect()
    try:
        assert conn.max_rdy_count == 2500
        assert conn.msg_timeout == 60.0
        assert conn.is_connected
    finally:
        conn.close()


def test_pipelined_answers_are_matched_to_requests_in_order(scripted: Any) -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        pending: list[bytes] = []
        while True:
            line, body = peer.read_command()
            assert line.startswith(b"PUB topic")
            assert body is not None
            pending.append(body)
            # Answer in uneven batches, each answer naming its request.
            if len(pending) >= 7 or not peer.buf:
                peer.send(b"".join(peer.frame(FRAME_TYPE_RESPONSE, b"re:" + b) for b in pending))
                pending.clear()

    conn = Connection(scripted(script).address)
    conn.connect()
    results: dict[int, bytes | None] = {}

    def publisher(i: int) -> None:
        for j in range(5):
            body = f"{i}-{j}".encode()
            results[i * 10 + j] = conn.publish("topic", body).get(timeout=5)
            assert results[i * 10 + j] == b"re:" + body

    try:
        gevent.joinall([gevent.spawn(publisher, i) for i in range(100)], raise_error=True)
        assert len(results) == 500
        assert conn.pending == 0
    finally:
        conn.close()


def test_heartbeats_are_answered_with_nop(scripted: Any) -> None:
    nops = gevent.event.Event()

    def script(peer: Peer) -> None:
        peer.handshake()
        for _ in range(3):
            peer.respond(b"_heartbeat_")
            assert peer.read_command() == (b"NOP", None)
        nops.set()
        until_eof(peer)

    conn = Connection(scripted(script).address)
    conn.connect()
    try:
        assert nops.wait(5)
        assert conn.is_connected
    finally:
        conn.close()


def test_a_silent_server_is_declared_dead_after_two_heartbeat_intervals(scripted: Any) -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        until_eof(peer)  # never sends a heartbeat

    ended: gevent.event.AsyncResult[Exception | None] = gevent.event.AsyncResult()
    conn = Connection(
        scripted(script).address,
        ConnectionConfig(heartbeat_interval=1.0),
        on_close=lambda c, err: ended.set(err),
    )
    conn.connect()
    started = time.monotonic()
    error = ended.get(timeout=5)
    elapsed = time.monotonic() - started
    assert isinstance(error, BrokenConnectionError)
    assert error.address == conn.name
    assert "two heartbeat intervals" in str(error)
    assert 1.9 <= elapsed < 4
    assert conn.join(1)


def test_commands_written_together_go_out_in_one_send(scripted: Any) -> None:
    fins = gevent.event.Event()
    lines: list[bytes] = []

    def script(peer: Peer) -> None:
        peer.handshake()
        assert peer.read_command()[0] == b"SUB t c"
        peer.respond()
        while len(lines) < 50:
            lines.append(peer.read_command()[0])
        fins.set()
        until_eof(peer)

    conn = Connection(scripted(script).address)
    conn.connect()
    conn.subscribe("t", "c", timeout=5)
    sends: list[int] = []
    real = conn.writer.stream

    class CountingStream:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def send_nowait(self, data: bytes) -> int:
            sent: int = real.send_nowait(data)  # type: ignore[union-attr]
            sends.append(sent)
            return sent

        def sendall(self, data: bytes) -> None:
            sends.append(len(data))
            real.sendall(data)  # type: ignore[union-attr]

    conn.writer.stream = CountingStream()  # type: ignore[assignment]
    try:
        for i in range(50):
            conn.finish(f"{i:016d}")
        assert fins.wait(5)
        assert lines == [f"FIN {i:016d}".encode() for i in range(50)]
        assert sends == [50 * len(b"FIN 0000000000000000\n")]
    finally:
        conn.writer.stream = real
        conn.close()


class RecordingSends:
    """Wraps a connection's stream; records which greenlet made each write and what it sent."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.real: Any = conn.writer.stream
        self.sends: list[tuple[Any, bytes]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def send_nowait(self, data: bytes) -> int:
        self.sends.append((gevent.getcurrent(), bytes(data)))
        sent: int = self.real.send_nowait(data)
        return sent

    def sendall(self, data: bytes) -> None:
        self.sends.append((gevent.getcurrent(), bytes(data)))
        self.real.sendall(data)

    def __enter__(self) -> RecordingSends:
        self.conn.writer.stream = self  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.writer.stream = self.real


def test_a_lone_request_goes_out_from_the_hub_without_waking_the_writer(scripted: Any) -> None:
    # One PUB at a time is latency-bound: its flush runs in the hub before it
    # polls, with no switch into the writer greenlet.
    def script(peer: Peer) -> None:
        peer.handshake()
        assert peer.read_command() == (b"PUB t", b"x")
        peer.respond()
        until_eof(peer)

    conn = Connection(scripted(script).address)
    conn.connect()
    try:
        with RecordingSends(conn) as recording:
            assert conn.publish("t", b"x").get(timeout=5) == b"OK"
            assert [sender for sender, _ in recording.sends] == [gevent.get_hub()]
    finally:
        conn.close()


def subscribed_reading_two(scripted: Any) -> tuple[Connection, gevent.event.Event, list[bytes]]:
    """A connection subscribed to t/c, and the next two command lines nsqd reads (set ``got``)."""
    got = gevent.event.Event()
    lines: list[bytes] = []

    def script(peer: Peer) -> None:
        peer.handshake()
        assert peer.read_command()[0] == b"SUB t c"
        peer.respond()
        lines.extend(peer.read_command()[0] for _ in range(2))
        got.set()
        until_eof(peer)

    conn = Connection(scripted(script).address)
    conn.connect()
    conn.subscribe("t", "c", timeout=5)
    return conn, got, lines


def test_flush_sends_what_is_queued_from_the_calling_greenlet(scripted: Any) -> None:
    conn, got, lines = subscribed_reading_two(scripted)
    try:
        with RecordingSends(conn) as recording:
            conn.finish("0000000000000001")
            conn.ready(1)
            assert recording.sends == []  # queued for the hub's flush
            conn.flush()
            assert recording.sends == [
                (gevent.getcurrent(), b"FIN 0000000000000001\nRDY 1\n")
            ]  # one send, from here, before any yield
            conn.flush()  # nothing queued: nothing sent
            assert len(recording.sends) == 1
            assert got.wait(5)
            assert lines == [b"FIN 0000000000000001", b"RDY 1"]
            assert len(recording.sends) == 1  # the hub's scheduled flush found nothing left
    finally:
        conn.close()


def test_a_finish_sent_now_goes_out_at_once_with_what_was_queued_before_it(
    scripted: Any,
) -> None:
    # A consumer's FIN of its connection's last message in flight (every FIN at
    # max_in_flight=1) is not left for the hub's flush: nsqd starts on the
    # next message while the handler's greenlet does its counting.
    conn, got, lines = subscribed_reading_two(scripted)
    try:
        with RecordingSends(conn) as recording:
            conn.ready(1)
            assert recording.sends == []  # queued for the hub's flush
            conn.finish("0000000000000001", now=True)
            assert recording.sends == [
                (gevent.getcurrent(), b"RDY 1\nFIN 0000000000000001\n")
            ]  # one send, from here, before any yield
            assert got.wait(5)
            assert lines == [b"RDY 1", b"FIN 0000000000000001"]
            assert len(recording.sends) == 1  # the hub's scheduled flush found nothing left
    finally:
        conn.close()


def test_a_flush_the_socket_takes_in_part_is_finished_before_later_commands(
    scripted: Any,
) -> None:
    # The socket takes 3 bytes of a PUB's flush; the writer sends the rest,
    # and only then the PUBs other greenlets queued meanwhile: frames stay
    # whole and in order, and nobody waited on the socket but the writer.
    def script(peer: Peer) -> None:
        peer.handshake()
        for _ in range(4):
            peer.read_command()
            peer.respond()
        until_eof(peer)

    server = scripted(script)
    conn = Connection(server.address)
    conn.connect()
    real: Any = conn.writer.stream
    throttled = [True]

    class SlowStream:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def send_nowait(self, data: bytes) -> int:  # a flush, which must not wait
            if throttled[0]:
                throttled[0] = False
                sent: int = real.send_nowait(bytes(data[:3]))
                return sent
            sent = real.send_nowait(data)
            return sent

    conn.writer.stream = SlowStream()
    try:
        first = conn.publish("t", b"first")
        rest = [gevent.spawn(conn.publish, "t", f"m{i}".encode()) for i in range(3)]
        gevent.joinall(rest, raise_error=True)
        assert first.get(timeout=5) == b"OK"
        assert not throttled[0]  # the partial flush happened
        assert all(g.get().get(timeout=5) == b"OK" for g in rest)  # each greenlet's AsyncResult
        wait_until(lambda: len(server.peers[0].commands) >= 5, timeout=5)
        assert server.peers[0].commands[1:] == [
            (b"PUB t", b"first"),
            (b"PUB t", b"m0"),
            (b"PUB t", b"m1"),
            (b"PUB t", b"m2"),
        ]
    finally:
        conn.writer.stream = real
        conn.close()


def test_messages_reach_on_message_and_close_sends_cls(scripted: Any) -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        assert peer.read_command()[0] == b"SUB t c"
        peer.respond()
        assert peer.read_command()[0] == b"RDY 2"
        for i in range(2):
            message = WireMessage(f"{i:016d}".encode(), b"body%d" % i, time.time_ns(), 1)
            peer.send(peer.frame(FRAME_TYPE_MESSAGE, encode_message(message)))
        assert peer.read_command()[0] == b"FIN 0000000000000000"
        assert peer.read_command()[0] == b"FIN 0000000000000001"
        assert peer.read_command()[0] == b"CLS"
        peer.respond(b"CLOSE_WAIT")
        until_eof(peer)

    received: list[bytes] = []

    def on_message(conn: Connection, message: WireMessage) -> None:
        received.append(message.body)
        conn.finish(message.id)

    server = scripted(script)
    conn = Connection(server.address, on_message=on_message)
    conn.connect()
    conn.subscribe("t", "c", timeout=5)
    conn.ready(2)
    wait_until(lambda: len(received) == 2, timeout=5)
    conn.close(timeout=5)
    assert received == [b"body0", b"body1"]
    assert conn.wait_close_wait(0)
    assert conn.join(0)
    assert server.done.wait(5)


def test_close_gives_up_waiting_for_close_wait_after_its_timeout(scripted: Any) -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        peer.read_command()
        peer.respond()
        ignore_all(peer)  # never answers CLS

    conn = Connection(scripted(script).address)
    conn.connect()
    conn.subscribe("t", "c", timeout=5)
    started = time.monotonic()
    conn.close(timeout=0.3)
    assert 0.25 <= time.monotonic() - started < 2
    assert conn.closed
    assert conn.join(0)


def test_a_fatal_error_fails_its_request_and_breaks_the_others(scripted: Any) -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        peer.read_command()
        peer.read_command()
        peer.read_command()
        peer.respond()
        peer.error(b"E_BAD_TOPIC PUB topic name is not valid")

    conn = Connection(scripted(script).address)
    conn.connect()
    first = conn.publish("a", b"1")
    second = conn.publish("b", b"2")
    third = conn.publish("c", b"3")
    assert first.get(timeout=5) == b"OK"
    with pytest.raises(BadTopicError):
        second.get(timeout=5)
    with pytest.raises(BrokenConnectionError) as info:
        third.get(timeout=5)
    assert info.value.address == conn.name
    assert isinstance(info.value.__cause__, BadTopicError)
    assert conn.join(2)
    with pytest.raises(BrokenConnectionError):
        conn.publish("d", b"4")


@pytest.mark.parametrize("kind", ["snappy", "deflate"])
def test_bytes_after_the_identify_reply_go_through_the_new_codec(scripted: Any, kind: str) -> None:
    """IDENTIFY's reply, the compressed OK and a heartbeat arrive in one segment."""

    def script(peer: Peer) -> None:
        assert peer.read_exact(4) == b"  V2"
        line, body = peer.read_command()
        assert body is not None
        asked = json.loads(body)
        assert asked[kind] is True
        reply = json.dumps({kind: True, "deflate_level": 2, "max_rdy_count": 10}).encode()
        codec = make_codec(kind, 2)
        compressed = codec.encode(
            encode_frame(FRAME_TYPE_RESPONSE, b"OK")
            + encode_frame(FRAME_TYPE_RESPONSE, b"_heartbeat_")
        )
        peer.sock.sendall(encode_frame(FRAME_TYPE_RESPONSE, reply) + compressed)
        peer.codec = codec
        assert peer.read_command() == (b"NOP", None)
        line, body = peer.read_command()
        assert (line, body) == (b"PUB t", b"x" * 1000)
        peer.respond()
        until_eof(peer)

    config = ConnectionConfig(snappy=kind == "snappy", deflate=kind == "deflate")
    conn = Connection(scripted(script).address, config)
    conn.connect()
    try:
        assert conn.compression == kind
        assert conn.max_rdy_count == 10
        assert conn.publish("t", b"x" * 1000).get(timeout=5) == b"OK"
    finally:
        conn.close()


def test_tls_refused_by_the_server_is_an_error_not_a_plaintext_fallback(scripted: Any) -> None:
    def script(peer: Peer) -> None:
        peer.handshake({"tls_v1": False, "max_rdy_count": 2500})
        until_eof(peer)

    server = scripted(script)
    conn = Connection(server.address, ConnectionConfig(tls_v1=True))
    with pytest.raises(NegotiationError, match="TLS") as info:
        conn.connect()
    assert server.address in str(info.value)
    assert conn.closed
    assert not conn.tls
    assert server.done.wait(5)


def test_auth_sends_the_secret_and_keeps_the_identity(scripted: Any) -> None:
    secrets: list[bytes | None] = []

    def script(peer: Peer) -> None:
        peer.handshake({"auth_required": True})
        line, body = peer.read_command()
        assert line == b"AUTH"
        secrets.append(body)
        peer.respond(b'{"identity":"me","identity_url":"","permission_count":1}')
        until_eof(peer)

    conn = Connection(scripted(script).address, ConnectionConfig(auth_secret="s3cret"))
    conn.connect()
    try:
        assert secrets == [b"s3cret"]
        assert conn.identity == {"identity": "me", "identity_url": "", "permission_count": 1}
    finally:
        conn.close()


def test_auth_required_without_a_secret_is_a_clear_error(scripted: Any) -> None:
    def script(peer: Peer) -> None:
        peer.handshake({"auth_required": True})
        until_eof(peer)

    server = scripted(script)
    with pytest.raises(NegotiationError, match=r"requires AUTH.*no auth_secret"):
        Connection(server.address).connect()
    assert server.done.wait(5)
    assert [c[0] for c in server.peers[0].commands] == [b"IDENTIFY"]


def test_refused_auth_raises_the_server_error_and_never_logs_the_secret(
    scripted: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def script(peer: Peer) -> None:
        peer.handshake({"auth_required": True})
        peer.read_command()
        peer.error(b"E_UNAUTHORIZED AUTH no authorizations found")

    caplog.set_level(logging.DEBUG)
    server = scripted(script)
    config = ConnectionConfig(auth_secret="hunter2-secret")
    conn = Connection(server.address, config)
    with pytest.raises(UnauthorizedError, match="no authorizations found") as info:
        conn.connect()
    assert server.address in str(info.value)
    assert "hunter2" not in repr(config)
    assert "hunter2" not in repr(conn)
    assert "hunter2" not in str(info.value)
    assert "hunter2" not in caplog.text


def test_connect_refused_is_typed_and_carries_the_address() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    conn = Connection(f"127.0.0.1:{port}")
    with pytest.raises(BrokenConnectionError) as info:
        conn.connect()
    assert info.value.address == f"127.0.0.1:{port}"
    assert isinstance(info.value.__cause__, ConnectionRefusedError)
    with pytest.raises(ConnectionClosedError):
        conn.connect()


def test_a_handshake_that_never_ends_times_out(scripted: Any) -> None:
    def script(peer: Peer) -> None:
        ignore_all(peer)  # reads the magic and IDENTIFY, never answers

    server = scripted(script)
    conn = Connection(server.address, ConnectionConfig(connect_timeout=0.3))
    started = time.monotonic()
    with pytest.raises(NSQTimeoutError, match=server.address):
        conn.connect()
    assert time.monotonic() - started < 2
    assert conn.closed
    assert server.done.wait(5)  # the socket was closed


def test_the_constructor_opens_nothing_and_close_before_connect_is_fine() -> None:
    before = gevent.getcurrent()
    conn = Connection("127.0.0.1:1")
    assert conn.stream is None
    assert conn.reader.greenlet is None and conn.writer.greenlet is None
    assert not conn.is_connected
    conn.close()
    assert conn.closed
    assert gevent.getcurrent() is before
    with pytest.raises(ConnectionClosedError):
        conn.publish("t", b"x")


def test_the_server_closing_the_connection_fails_pending_requests(scripted: Any) -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        peer.read_command()  # the PUB, then hang up without answering

    ended: gevent.event.AsyncResult[Exception | None] = gevent.event.AsyncResult()
    conn = Connection(scripted(script).address, on_close=lambda c, e: ended.set(e))
    conn.connect()
    result = conn.publish("t", b"x")
    with pytest.raises(BrokenConnectionError, match="closed the connection"):
        result.get(timeout=5)
    assert isinstance(ended.get(timeout=5), BrokenConnectionError)
    assert conn.join(1)


def test_a_failing_callback_is_logged_and_the_connection_goes_on(
    scripted: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def script(peer: Peer) -> None:
        peer.handshake()
        peer.read_command()
        peer.respond()
        for i in range(2):
            message = WireMessage(f"{i:016d}".encode(), b"b%d" % i, time.time_ns(), 1)
            peer.send(peer.frame(FRAME_TYPE_MESSAGE, encode_message(message)))
        until_eof(peer)

    received: list[bytes] = []

    def on_message(conn: Connection, message: WireMessage) -> None:
        received.append(message.body)
        if message.body == b"b0":
            raise RuntimeError("handler bug")

    conn = Connection(scripted(script).address, on_message=on_message)
    conn.connect()
    try:
        conn.subscribe("t", "c", timeout=5)
        wait_until(lambda: len(received) == 2, timeout=5)
        assert conn.is_connected
        assert "handler bug" in caplog.text
    finally:
        conn.close()


def test_a_deflate_bomb_is_decoded_in_bounded_steps_and_refused(scripted: Any) -> None:
    """256 KiB of deflate that inflate to 256 MiB: the client never holds more than a step.

    The stream is a frame header claiming 256 MiB (over ``max_frame_size``)
    followed by zeros; decoded 64 KiB at a time, the header is refused before
    the rest is inflated.
    """
    bomb_size = 256 * 1024 * 1024
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    zeros = bytes(1024 * 1024)
    parts = [compressor.compress(struct.pack(">I", bomb_size) + zeros[:4])]
    parts += [compressor.compress(zeros) for _ in range(bomb_size // len(zeros))]
    parts.append(compressor.flush(zlib.Z_SYNC_FLUSH))
    bomb = b"".join(parts)
    assert len(bomb) < 512 * 1024
    del parts, zeros

    def script(peer: Peer) -> None:
        peer.handshake({"deflate": True, "deflate_level": 9, "max_rdy_count": 10})
        peer.codec = make_codec("deflate", 9)
        peer.respond()  # the compressed OK that confirms the upgrade
        assert peer.read_command()[0] == b"PUB t"
        with contextlib.suppress(OSError):
            peer.sock.sendall(bomb)
        with contextlib.suppress(EOFError, OSError):
            ignore_all(peer)

    conn = Connection(scripted(script).address, ConnectionConfig(deflate=True))
    tracemalloc.start()
    try:
        conn.connect()
        result = conn.publish("t", b"x")
        wait_until(lambda: conn.closed, timeout=10, message="the bomb ended the connection")
        assert result.ready() and not result.successful()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        conn.close()
    assert isinstance(conn.error, RemoteProtocolError), conn.error
    assert peak < 16 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB while reading the bomb"
