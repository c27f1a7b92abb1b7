"""SessionOutput on its own: the broker's output queue and writer greenlet, with a fake socket.

What a client relies on: everything queued in one turn of the hub leaves in
one write, a compressed stream is cut where nsqd flushes, a client that does
not read is dropped after the write deadline, and a close waits for what is
queued only when asked to.
"""

from __future__ import annotations

import gevent
import gevent.event
import pytest

from gnsqlite.broker.client_output import SessionOutput
from gnsqlite.broker.wire import empty_flush_writes, flush_writes
from gnsqlite.codecs import make_codec

pytestmark = pytest.mark.no_server


class FakeSocket:
    """Records each ``sendall``; ``stall`` makes them block until the test ends."""

    def __init__(self, stall: bool = False) -> None:
        self.writes: list[bytes] = []
        self.stall = stall
        self.closed = False
        self.wrote = gevent.event.Event()

    def sendall(self, data: bytes) -> None:
        if self.stall:
            gevent.sleep(60)
        self.writes.append(bytes(data))
        self.wrote.set()

    def close(self) -> None:
        self.closed = True


def _output(sock: FakeSocket) -> tuple[SessionOutput, gevent.event.Event]:
    broken = gevent.event.Event()
    output = SessionOutput(sock, "<test session>", broken.set)
    return output, broken


def test_a_burst_leaves_in_one_write_and_the_count_resets() -> None:
    sock = FakeSocket()
    output, broken = _output(sock)
    output.start()
    try:
        output.send(b"response")
        output.send_message(b"message-1")
        output.send_message(b"message-2")
        assert output.queued_bytes == len(b"responsemessage-1message-2")
        assert sock.wrote.wait(5)
        assert sock.writes == [b"responsemessage-1message-2"]
        assert output.queued_bytes == 0 and not broken.is_set()
    finally:
        output.close()
    assert sock.closed


def test_a_compressed_stream_is_cut_where_nsqd_flushes() -> None:
    sock = FakeSocket()
    output, _ = _output(sock)
    codec = make_codec("deflate", 6)
    output.codec = codec
    output.send_message(b"m1")
    output.send(b"OK")  # a response: nsqd flushes after it
    output.mark_flush()  # the pump woke with nothing to send: an empty flush
    with output.lock:
        output.flush_locked()
    expected_codec = make_codec("deflate", 6)
    expected = flush_writes(expected_codec, b"m1OK") + empty_flush_writes(expected_codec)
    assert sock.writes == expected


def test_a_client_that_does_not_read_is_dropped_after_the_write_deadline() -> None:
    sock = FakeSocket(stall=True)
    output, broken = _output(sock)
    output.write_timeout = 0.05
    output.start()
    try:
        output.send(b"heartbeat")
        assert broken.wait(5), "the stalled write was not given up"
    finally:
        output.close()


def test_close_after_flush_sends_what_is_queued_first() -> None:
    sock = FakeSocket()
    output, broken = _output(sock)
    output.start()
    try:
        output.send(b"E_BAD_MESSAGE")
        output.close_after_flush()
        assert broken.wait(5)
        assert sock.writes == [b"E_BAD_MESSAGE"]
    finally:
        output.close()


def test_close_without_flush_drops_the_queue_and_wakes_a_waiting_reader() -> None:
    sock = FakeSocket()
    output, _ = _output(sock)
    output.send(b"never sent")
    waiter = gevent.spawn(output.wait_drained)  # a reader waiting for the writer
    gevent.sleep(0)
    output.close()
    waiter.join(5)
    assert waiter.dead
    assert sock.writes == [] and sock.closed
    output2, _ = _output(sock2 := FakeSocket())
    output2.send(b"kept")
    output2.close(flush=True)
    assert sock2.writes == [b"kept"]
