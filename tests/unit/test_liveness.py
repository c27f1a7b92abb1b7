"""The liveness rule: silent connections end; one wheel timer watches them all.

Connections over in-memory streams (no sockets). A connection that hears
nothing for two heartbeat intervals is dead; the hub's :class:`LivenessWatch`
enforces that for every connection with the same interval on one timer, so
idle connections do not each cost the timer wheel an entry and a wake-up.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import gevent.event
import pytest

from gnsqlite.config import ConnectionConfig
from gnsqlite.connection import Connection
from gnsqlite.connection.reader import (
    DEAD_AFTER_HEARTBEATS,
    SWEEPS_PER_LIMIT,
    LivenessWatch,
)
from gnsqlite.connection.stream import MemoryStream
from gnsqlite.errors import BrokenConnectionError
from gnsqlite.protocol.frames import FRAME_TYPE_RESPONSE, encode_frame
from gnsqlite.testing import wait_until
from gnsqlite.timers import TimerWheel

pytestmark = pytest.mark.no_server

INTERVAL = 1.0
LIMIT = DEAD_AFTER_HEARTBEATS * INTERVAL
HEARTBEAT = encode_frame(FRAME_TYPE_RESPONSE, b"_heartbeat_")


def connect(
    ended: gevent.event.AsyncResult[object] | None = None,
) -> tuple[Connection, MemoryStream]:
    stream = MemoryStream()
    conn = Connection(
        "127.0.0.1:4150",
        ConnectionConfig(heartbeat_interval=INTERVAL),
        on_close=(lambda c, error: ended.set(error)) if ended is not None else None,
        connect_stream=lambda address: stream,
    )
    stream.feed(encode_frame(FRAME_TYPE_RESPONSE, b'{"max_rdy_count": 2500}'))
    conn.connect()
    return conn, stream


@pytest.fixture
def many() -> Iterator[list[Connection]]:
    conns = [connect()[0] for _ in range(50)]
    gevent.sleep(0)  # their readers start reading
    try:
        yield conns
    finally:
        for conn in conns:
            conn.close(1.0)


def test_a_silent_connection_ends_within_the_limit_and_a_sweep() -> None:
    ended: gevent.event.AsyncResult[object] = gevent.event.AsyncResult()
    start = time.monotonic()
    conn, _ = connect(ended)
    error = ended.get(timeout=LIMIT * (1 + 1 / SWEEPS_PER_LIMIT) + 2.0)
    assert isinstance(error, BrokenConnectionError)
    assert "nothing heard for two heartbeat intervals" in str(error)
    assert time.monotonic() - start >= LIMIT
    assert conn.closed


def test_one_wheel_timer_watches_every_connection_of_an_interval(many: list[Connection]) -> None:
    watch = LivenessWatch.of(LIMIT)
    wheel = TimerWheel.for_hub()
    assert all(conn.reader in watch.readers for conn in many)
    assert len(wheel.owned_by(watch)) == 1
    assert not any(wheel.owned_by(conn.reader) for conn in many)
    for conn in many:
        conn.close(1.0)
    assert not watch.readers and not wheel.owned_by(watch)  # the last one out cancelled it


def test_a_sweep_ends_the_silent_connections_only(many: list[Connection]) -> None:
    watch = LivenessWatch.of(LIMIT)
    heard = many[:10]
    now = time.monotonic() + LIMIT  # as if a whole limit passed with no bytes
    for conn in heard:
        conn.last_received = now  # these heard a heartbeat just now
    assert watch.sweep(now) == 40
    gevent.sleep(0)  # the killed readers end
    for conn in many[10:]:
        assert conn.reader.greenlet is not None and conn.reader.greenlet.dead
    assert all(conn.reader in watch.readers for conn in heard)
    assert watch.sweep(now) == 0


def test_a_heartbeat_counts_as_hearing_from_nsqd() -> None:
    conn, stream = connect()
    try:
        gevent.sleep(0)
        before = conn.last_received
        stream.feed(HEARTBEAT)
        wait_until(lambda: conn.last_received > before, timeout=5, message="a heartbeat read")
        # A whole limit after the bytes before the heartbeat: silent but for it.
        assert LivenessWatch.of(LIMIT).sweep(before + LIMIT) == 0
        assert not conn.closed
    finally:
        conn.close(1.0)
