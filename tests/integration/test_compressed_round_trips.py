"""Many round trips on one compressed connection, the scenario that breaks pynsq.

nsqd cuts each flush of a snappy or deflate stream into two socket writes
(``gnsqlite/broker/wire.py`` says which), and writes empty deflate sync
blocks; so a client's ``recv`` regularly returns bytes that decompress to
nothing; a slow network can end a read anywhere. pynsq fails on that
(``tests/interop/test_interop_pynsq.py::test_compression``, pynsq #258);
gnsqlite's Connection, Producer and Consumer must not, on the embedded broker
and on the real nsqd alike, straight and through a :class:`PieceProxy` that
hands the client three bytes at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gevent.event
import pytest

from gnsqlite.config import ConnectionConfig
from gnsqlite.connection import Connection
from gnsqlite.consumer import Consumer
from gnsqlite.message import Message
from gnsqlite.producer import Producer
from gnsqlite.testing import NsqdServer, PieceProxy, wait_until

ROUND_TRIPS = 300  # pynsq broke within 100 in every trial on both brokers
PIECES_ROUND_TRIPS = 60  # through the proxy every read is partial: fewer suffice
TOPIC = "compressed"


@pytest.fixture(params=["straight", "pieces"])
def route(request: pytest.FixtureRequest, nsqd: NsqdServer) -> Iterator[tuple[str, int]]:
    """(address to connect to, round trips): nsqd itself, or a PieceProxy before it."""
    if request.param == "straight":
        yield nsqd.tcp_address, ROUND_TRIPS
        return
    with PieceProxy(nsqd.tcp_address, piece_size=3) as proxy:
        yield proxy.address, PIECES_ROUND_TRIPS


COMPRESSION = pytest.mark.parametrize(
    "options",
    [{"snappy": True}, {"deflate": True, "deflate_level": 6}],
    ids=["snappy", "deflate"],
)


@COMPRESSION
def test_connection_publishes_one_at_a_time(
    nsqd: NsqdServer, route: tuple[str, int], options: dict[str, Any]
) -> None:
    address, count = route
    conn = Connection(address, ConnectionConfig(heartbeat_interval=1.0, **options))
    conn.connect()
    try:
        assert conn.compression == next(iter(options))
        for i in range(count):
            assert conn.publish(TOPIC, b"c%d" % i).get(timeout=5) == b"OK"
    finally:
        conn.close()
    assert nsqd.topic_stats(TOPIC)["message_count"] == count


@COMPRESSION
def test_producer_and_consumer_one_message_at_a_time(
    nsqd: NsqdServer, route: tuple[str, int], options: dict[str, Any]
) -> None:
    address, count = route
    bodies = [b"m%d" % i for i in range(count)]
    with Producer(address, **options) as producer:
        for body in bodies:
            producer.publish(TOPIC, body)

    seen: list[bytes] = []
    done = gevent.event.Event()

    def handle(message: Message) -> None:
        seen.append(message.body)
        if len(seen) == len(bodies):
            done.set()

    # max_in_flight=1: every message is its own flush, read while the client waits
    consumer = Consumer(
        TOPIC, "ch", handle, nsqd_tcp_addresses=[address], max_in_flight=1, **options
    )
    consumer.start()
    try:
        assert done.wait(timeout=30), f"{len(seen)} of {len(bodies)} messages arrived"
        wait_until(lambda: nsqd.channel_drained(TOPIC, "ch"), timeout=10)
        [client] = nsqd.channel_stats(TOPIC, "ch")["clients"]
        assert client[next(iter(options))] is True  # nsqd saw the compressed connection
    finally:
        consumer.close()
    assert sorted(seen) == sorted(bodies)
    assert len(seen) == len(set(seen))  # each exactly once
