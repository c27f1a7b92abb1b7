"""A connection's reads land in the thread's reused buffer, not in 64 KiB of heap each.

A socket's ``recv(65536)`` takes 64 KiB of the C heap for every read and
shrinks it to what arrived; a long run's glibc heap fragmented around them
(the soak's RSS crept with its reconnects, every page of it memory glibc
kept free: ``docs/guarantees.md``, "Memory over a long run"). Over a real
socket pair, with the test playing nsqd, one message per read: the reads'
peak of traced memory stays far below one such buffer, on both read paths
(the hub's, for a connection whose messages are their own events, and the
reader greenlet's).
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import gevent
import gevent.event
import gevent.socket
import pytest

from gnsqlite.config import ConnectionConfig
from gnsqlite.connection import Connection
from gnsqlite.connection.stream import SocketStream
from gnsqlite.protocol import WireMessage
from gnsqlite.protocol.frames import (
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    encode_frame,
    encode_message,
)

pytestmark = pytest.mark.no_server

READS = 50
OK = encode_frame(FRAME_TYPE_RESPONSE, b"OK")


def message(number: int) -> bytes:
    wire = WireMessage(b"%016d" % number, b"body %d" % number, 1, 1)
    return encode_frame(FRAME_TYPE_MESSAGE, encode_message(wire))


def until(nsqd: Any, command: bytes) -> None:
    """Read what the client wrote until ``command`` is in it (5 s at most)."""
    written = b""
    with gevent.Timeout(5.0):
        while command not in written:
            written += nsqd.recv(4096)


@pytest.mark.parametrize("message_class", [bytes, None], ids=["hub-reads", "greenlet-reads"])
def test_reads_take_a_reads_size_of_memory_not_64_kib_each(message_class: Any) -> None:
    ours, nsqd = gevent.socket.socketpair()
    nsqd.sendall(OK)  # the answer to IDENTIFY, ahead of time
    received: list[Any] = []
    arrived = gevent.event.Event()

    def on_message(connection: Connection, msg: Any) -> None:
        received.append(msg)
        arrived.set()

    conn = Connection(
        "127.0.0.1:4150",
        ConnectionConfig(client_id="c", hostname="h"),
        on_message=on_message,
        message_class=message_class,
        connect_stream=lambda address: SocketStream(ours),
    )
    conn.connect()
    subscribing = gevent.spawn(conn.subscribe, "t", "c", 5.0)
    until(nsqd, b"SUB t c\n")
    nsqd.sendall(OK)
    subscribing.get(timeout=5)

    def one_read(number: int) -> None:
        arrived.clear()
        nsqd.sendall(message(number))
        assert arrived.wait(5.0), f"message {number} was not read"

    tracemalloc.start()
    try:
        one_read(0)  # the first read's one-off costs
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        for number in range(1, READS + 1):
            one_read(number)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(received) == READS + 1
    assert peak - before < 16 * 1024, f"the reads' peak was {peak - before} bytes above the start"

    closing = gevent.spawn(conn.close, 5.0)
    until(nsqd, b"CLS\n")
    nsqd.sendall(encode_frame(FRAME_TYPE_RESPONSE, b"CLOSE_WAIT"))
    closing.get(timeout=5)
    nsqd.close()
