"""Many FINs in one write (``finish_all``), against a live nsqd, embedded or real.

A consumer holds ``N`` messages (async), then finishes them with
:func:`gnsqlite.message.finish_all`: the connection must send every FIN in
one socket write, and nsqd must count each one finished (channel drained,
nothing requeued or timed out), as if each had been finished on its own.
"""

from __future__ import annotations

from typing import Any

import gevent.event

from gnsqlite.consumer import Consumer
from gnsqlite.http import NsqdHTTPClient
from gnsqlite.message import Message, finish_all
from gnsqlite.testing import NsqdServer, wait_until

TOPIC = "finish_many"
CHANNEL = "ch"


class CountingStream:
    """Wraps a connection's stream and keeps what each write was given."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.writes: list[bytes] = []

    def send_nowait(self, data: bytes) -> int:
        self.writes.append(bytes(data))
        sent: int = self.stream.send_nowait(data)
        return sent

    def sendall(self, data: Any) -> None:
        self.writes.append(bytes(data))
        self.stream.sendall(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def test_finish_all_sends_a_connections_fins_in_one_write(nsqd: NsqdServer) -> None:
    n = 500
    NsqdHTTPClient(nsqd.http_address, timeout=10.0).mpub(TOPIC, [b"m%d" % i for i in range(n)])
    held: list[Message] = []
    all_held = gevent.event.Event()

    def hold(messages: list[Message]) -> None:
        for message in messages:
            message.enable_async()
        held.extend(messages)
        if len(held) >= n:
            all_held.set()

    consumer = Consumer(
        TOPIC,
        CHANNEL,
        batch_handler=hold,
        batch_size=100,
        batch_timeout=0.05,
        max_in_flight=n,
        backoff=None,
        nsqd_tcp_addresses=[nsqd.tcp_address],
    )
    consumer.start()
    spy: CountingStream | None = None
    try:
        assert all_held.wait(10), f"held {len(held)} of {n}"
        conn = held[0].connection
        assert all(m.connection is conn for m in held)
        spy = CountingStream(conn.writer.stream)
        conn.writer.stream = spy
        assert finish_all(held) == n
        wait_until(lambda: nsqd.channel_drained(TOPIC, CHANNEL), timeout=10)
        fin_writes = [w for w in spy.writes if b"FIN " in w]
        assert len(fin_writes) == 1
        assert fin_writes[0].count(b"FIN ") == n
        assert sorted(fin_writes[0].split(b"\n")[:-1]) == sorted(b"FIN " + m.wire_id for m in held)
        stats = nsqd.channel_stats(TOPIC, CHANNEL)
        assert stats["requeue_count"] == 0 and stats["timeout_count"] == 0
        totals = consumer.stats()["totals"]
        assert totals["finished"] == n and totals["in_flight"] == 0
        assert finish_all(held) == 0  # answered once: nothing more is sent
    finally:
        if spy is not None:
            held[0].connection.writer.stream = spy.stream
        consumer.close(5.0)
