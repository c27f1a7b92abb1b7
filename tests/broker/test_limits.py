"""Limits a server must have: read and write deadlines, bounded buffers, connections.

The tests that watch the broker from outside run on the embedded broker and
on the real nsqd v1.3.0 (``GNSQLITE_NSQD``): both cut a command trickled in
byte by byte at two heartbeat intervals (``protocol_v2.go``'s read deadline
per command) and drop a subscriber that stops reading once a write has
stalled for a heartbeat interval (``Send``'s write deadline). The rest test
the embedded broker's own bounds in-process: a connection that never sends
the magic (real nsqd keeps it open forever: ``tcp.go`` reads the magic with no
deadline; measured: still open after 75 s), ``max_connections`` (nsqd has no
such flag), the queued-output bound and the bounded inflation of compressed
input.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
import zlib
from collections.abc import Callable
from typing import Any

import gevent
import gevent.socket
import pytest
from nsqd_raw import Closed, RawClient

from gnsqlite.broker import Broker
from gnsqlite.broker.client_reader import DECODE_STEP, MAX_QUEUED_OUTPUT
from gnsqlite.protocol.frames import FRAME_TYPE_RESPONSE
from gnsqlite.testing import wait_until
from gnsqlite.testing.servers import NsqdServer


def _read_until_closed(client: RawClient, timeout: float) -> list[tuple[int, bytes]]:
    """Frames other than heartbeats until the server closes; gevent.Timeout if it does not."""
    frames: list[tuple[int, bytes]] = []
    with gevent.Timeout(timeout):
        while True:
            try:
                frame = client.frame(timeout)
            except (Closed, ConnectionResetError):
                return frames
            if frame != (FRAME_TYPE_RESPONSE, b"_heartbeat_"):
                frames.append(frame)


def _small_window_socket(address: str) -> Any:
    """A connected socket with a 4 KiB receive buffer: a reader that fills up at once."""
    sock = gevent.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    host, port = address.rsplit(":", 1)
    sock.connect((host, int(port)))
    return sock


def _trickle(sock: Any, data: bytes, pause: float) -> None:
    try:
        for byte in data:
            sock.sendall(bytes([byte]))
            gevent.sleep(pause)
    except OSError:
        pass  # the server closed the connection: what the test waits for


@pytest.mark.parametrize(
    ("command", "pause", "answer"),
    [
        # the line itself trickles past the deadline: closed without a word
        (b"PUB " + b"s" * 60 + b"\n", 0.1, []),
        # the line arrives, the body trickles: nsqd's failed body read is answered
        (
            b"PUB slowloris\n" + struct.pack(">i", 64) + b"x" * 64,
            0.1,
            [(1, b"E_BAD_MESSAGE PUB failed to read message body")],
        ),
    ],
    ids=["in-line", "in-body"],
)
def test_a_command_trickled_in_is_cut_at_two_heartbeat_intervals(
    nsqd_factory: Callable[..., NsqdServer],
    command: bytes,
    pause: float,
    answer: list[tuple[int, bytes]],
) -> None:
    """Slow loris: bytes arriving do not extend nsqd's per-command read deadline."""
    server = nsqd_factory()
    with RawClient(server.tcp_address, timeout=15) as client:
        client.negotiate(heartbeat_interval=1000)
        start = time.monotonic()
        # one byte every 0.1 s: the command would take 6 to 8 s, the deadline is 2 s
        sender = gevent.spawn(_trickle, client.sock, command, pause)
        try:
            frames = _read_until_closed(client, timeout=10)
        finally:
            sender.kill()
        elapsed = time.monotonic() - start
    assert 1.5 < elapsed < 6, f"closed after {elapsed:.1f} s; the read deadline is 2 s"
    assert frames == answer
    assert server.topic_stats("slowloris").get("message_count", 0) == 0


def test_commands_that_each_finish_in_time_keep_the_connection(
    nsqd_factory: Callable[..., NsqdServer],
) -> None:
    """The deadline is per command: NOPs every 0.5 s outlive several heartbeat intervals."""
    server = nsqd_factory()
    with RawClient(server.tcp_address, timeout=15) as client:
        client.negotiate(heartbeat_interval=1000)
        deadline = time.monotonic() + 3.5
        while time.monotonic() < deadline:
            client.command(b"NOP")
            gevent.sleep(0.5)
        client.command(b"PUB kept", b"still here")
        assert client.response() == b"OK"


def test_a_subscriber_that_stops_reading_is_dropped(
    nsqd_factory: Callable[..., NsqdServer],
) -> None:
    """Write deadline: once a write stalls for a heartbeat interval the client is closed."""
    server = nsqd_factory()
    sock = _small_window_socket(server.tcp_address)
    sock.sendall(b"  V2")
    client = RawClient.__new__(RawClient)
    RawClient.__init__(client, server.tcp_address, magic=False)  # only to reuse the helpers
    client.sock.close()
    client.sock = sock
    try:
        client.negotiate(heartbeat_interval=1000)
        client.command(b"SUB limits c")
        assert client.response() == b"OK"
        body = b"y" * 65536
        for _ in range(4):  # 16 MiB: far more than the socket buffers of both ends
            server.http.mpub("limits", [body] * 64)
        client.command(b"RDY 1000")
        # never read again: the broker must give up on this client
        wait_until(lambda: server.channel_stats("limits", "c").get("clients") == [], timeout=20)
    finally:
        sock.close()


# -- the embedded broker's own bounds -------------------------------------------


@pytest.mark.embedded_only
@pytest.mark.parametrize("send", [b"", b"  V2"], ids=["no-magic", "magic-only"])
def test_an_idle_handshake_is_closed_after_client_timeout(
    make_broker: Callable[..., Broker], send: bytes
) -> None:
    """Stricter than nsqd, which waits forever for the magic (it has a deadline after it)."""
    broker = make_broker(client_timeout=1.0, queue_scan_interval=0.05)
    assert broker.tcp_address is not None
    with RawClient(broker.tcp_address, magic=False, timeout=10) as client:
        client.sock.sendall(send)
        start = time.monotonic()
        _read_until_closed(client, timeout=8)
        elapsed = time.monotonic() - start
    assert 0.8 < elapsed < 4, elapsed
    wait_until(lambda: not broker.clients)


@pytest.mark.embedded_only
def test_max_connections_closes_what_is_over_the_limit(
    make_broker: Callable[..., Broker],
) -> None:
    broker = make_broker(max_connections=2)
    assert broker.tcp_address is not None
    first = RawClient(broker.tcp_address)
    second = RawClient(broker.tcp_address)
    try:
        wait_until(lambda: len(broker.clients) == 2)
        with RawClient(broker.tcp_address) as third:
            _read_until_closed(third, timeout=5)
        for client in (first, second):  # those within the limit still work
            client.command(b"PUB t", b"x")
            assert client.response() == b"OK"
        first.close()
        wait_until(lambda: len(broker.clients) == 1)
        with RawClient(broker.tcp_address) as fourth:  # room again
            fourth.command(b"PUB t", b"y")
            assert fourth.response() == b"OK"
    finally:
        first.close()
        second.close()


@pytest.mark.embedded_only
def test_a_client_that_sends_without_reading_cannot_grow_the_output_queue(
    make_broker: Callable[..., Broker],
) -> None:
    """The reader stops parsing while too much output waits (nsqd's reader waits per write)."""
    broker = make_broker()
    assert broker.tcp_address is not None
    sock = _small_window_socket(broker.tcp_address)
    # a long heartbeat interval: the write deadline stays out of the way
    sock.sendall(b"  V2IDENTIFY\n" + struct.pack(">i", 28) + b'{"heartbeat_interval":60000}')
    sock.sendall(b"SUB flood c\n")
    wait_until(lambda: broker.clients)
    session: Any = next(iter(broker.clients))
    # 400,000 FINs of unknown ids (8 MB): each is answered by a non-fatal
    # E_FIN_FAILED of about 60 bytes (24 MB of answers) the client never reads
    flood = b"FIN 0123456789abcdef\n" * 400_000
    sender = gevent.spawn(lambda: _send_quietly(sock, flood))
    try:
        peak = 0
        for _ in range(100):
            gevent.sleep(0.02)
            peak = max(peak, session.output.queued_bytes)
        # the answers beyond the bound wait in the socket, unread: the queue stays bounded
        assert peak <= MAX_QUEUED_OUTPUT + 64 * 1024, peak
        assert not sender.dead, "the broker read the whole flood although nobody read its answers"
    finally:
        sender.kill()
        sock.close()


def _send_quietly(sock: Any, data: bytes) -> None:
    with contextlib.suppress(OSError):
        sock.sendall(data)


@pytest.mark.embedded_only
def test_a_deflate_bomb_is_inflated_one_step_at_a_time(
    make_broker: Callable[..., Broker],
) -> None:
    """256 KiB of deflate that inflate to 256 MiB of zeros: closed after one bounded step."""
    broker = make_broker()
    assert broker.tcp_address is not None
    with RawClient(broker.tcp_address, timeout=10) as client:
        assert client.negotiate(deflate=True)["deflate"] is True
        client.upgrade_codec("deflate")
        compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
        bomb = compressor.compress(b"\0" * (64 * 1024 * 1024)) + compressor.flush(zlib.Z_SYNC_FLUSH)
        assert len(bomb) < 128 * 1024
        session: Any = next(iter(broker.clients))
        client.sock.sendall(bomb)  # raw: it is already a deflate stream
        _read_until_closed(client, timeout=10)
        # the parser saw one step: a command line longer than 16 KiB ended it
        assert len(session.parser._buf) <= DECODE_STEP
