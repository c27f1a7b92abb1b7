"""Consumer edge cases: failures mid-handler, close at awkward moments, discovery faults.

Like ``test_consumer.py``, the broker is observed only through TCP, its HTTP
API and proxies, so these hold against a real nsqd as well. The fake lookupds
here stand in for a misbehaving lookupd, not for the broker.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import socket
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import gevent
import gevent.event
import gevent.pool
import gevent.pywsgi
import gevent.server
import gevent.socket
import pytest
from recording_proxy import RecordingProxy
from test_consumer import CHANNEL, TOPIC, channel_stats, drained, publish

from gnsqlite.consumer import Consumer
from gnsqlite.flow import ExponentialBackoff
from gnsqlite.message import Message
from gnsqlite.net import parse_address
from gnsqlite.testing import NsqdServer, wait_until
from gnsqlite.testing.faults import live_greenlets


class SubProxy:
    """Forwards to nsqd, but misbehaves around the first connection's ``SUB``.

    ``mode="hold"``: nsqd's answer to SUB never reaches the client.
    ``mode="cut"``: the answer is forwarded, then the client is cut at once.
    Later connections are forwarded unchanged.
    """

    def __init__(self, target: str, mode: str) -> None:
        self.target = parse_address(target)
        self.mode = mode
        self.connections = 0
        self._server = gevent.server.StreamServer(("127.0.0.1", 0), self._handle)
        self._pumps = gevent.pool.Group()

    @property
    def address(self) -> str:
        return f"{self._server.server_host}:{self._server.server_port}"

    def start(self) -> SubProxy:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()
        self._pumps.kill()

    def _handle(self, client: gevent.socket.socket, _address: object) -> None:
        first = self.connections == 0
        self.connections += 1
        upstream = gevent.socket.create_connection(self.target)
        sub_sent = gevent.event.Event()

        def up() -> None:
            with contextlib.suppress(OSError):
                while data := client.recv(65536):
                    if b"SUB " in data:
                        sub_sent.set()
                    upstream.sendall(data)

        def down() -> None:
            with contextlib.suppress(OSError):
                while data := upstream.recv(65536):
                    if first and sub_sent.is_set():
                        if self.mode == "hold":
                            gevent.event.Event().wait()
                        client.sendall(data)
                        client.close()  # "cut": the OK and the EOF arrive together
                        return
                    client.sendall(data)

        a = self._pumps.spawn(up)
        b = self._pumps.spawn(down)
        gevent.joinall([a, b], count=1)
        for g in (a, b):
            g.kill(block=False)
        for sock in (client, upstream):
            sock.close()


class FakeLookupd:
    """An HTTP server answering every request with ``answer()`` (status, body)."""

    def __init__(self, answer: Callable[[], tuple[str, bytes]]) -> None:
        self.answer = answer
        self.requests: list[float] = []
        self._server = gevent.pywsgi.WSGIServer(("127.0.0.1", 0), self._app, log=None)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._server.server_port}"

    def start(self) -> FakeLookupd:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(timeout=1)

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        self.requests.append(time.monotonic())
        status, body = self.answer()
        start_response(status, [("Content-Type", "application/json")])
        return [body]


def at_least(items: list[Any], count: int) -> bool:
    """For wait_until: ``items`` holds ``count`` entries or more."""
    return len(items) >= count


def test_a_handler_timing_out_requeues_and_the_worker_carries_on(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    publish(nsqd, [b"slow"])
    attempts: list[int] = []

    def handle(message: Message) -> None:
        attempts.append(message.attempts)
        if message.attempts == 1:
            with gevent.Timeout(0.01):  # escapes: a gevent.Timeout is a BaseException
                gevent.sleep(5)

    consumer = Consumer(
        TOPIC,
        CHANNEL,
        handle,
        nsqd_tcp_addresses=nsqd.tcp_address,
        concurrency=1,
        requeue_delay=0.0,
        backoff=ExponentialBackoff(0.05),
    )
    consumers.append(consumer)
    consumer.start()
    # Without an answer the message would wait for nsqd's 60 s timeout.
    wait_until(lambda: attempts == [1, 2] and drained(nsqd), timeout=10)
    assert channel_stats(nsqd)["requeue_count"] == 1
    assert channel_stats(nsqd)["timeout_count"] == 0
    assert consumer.stats()["totals"]["in_flight"] == 0


def test_set_max_in_flight_during_backoff_does_not_stall_the_flow(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    publish(nsqd, [b"fails-once"])
    attempts: list[int] = []

    def handle(message: Message) -> None:
        attempts.append(message.attempts)
        if message.attempts == 1:
            raise RuntimeError("first attempt fails")

    consumer = Consumer(
        TOPIC,
        CHANNEL,
        handle,
        nsqd_tcp_addresses=nsqd.tcp_address,
        max_in_flight=3,
        requeue_delay=0.0,
        backoff=ExponentialBackoff(0.5),  # a window long enough to act inside it
    )
    consumers.append(consumer)
    consumer.start()
    wait_until(lambda: consumer.stats()["backoff"]["state"] == "window", timeout=10)
    consumer.set_max_in_flight(0)  # paused by the user while backing off
    wait_until(lambda: consumer.stats()["backoff"]["state"] == "probing", timeout=5)
    assert consumer.stats()["totals"]["last_rdy"] == 0
    consumer.set_max_in_flight(3)  # resumed: the probe must go out
    wait_until(lambda: attempts == [1, 2] and drained(nsqd), timeout=10)
    wait_until(lambda: consumer.stats()["backoff"]["state"] == "normal", timeout=5)
    assert consumer.stats()["totals"]["last_rdy"] == 3


def test_close_requeues_async_messages_left_unanswered(nsqd: NsqdServer) -> None:
    publish(nsqd, [b"a1", b"a2"])
    pending: list[Message] = []

    def handle(message: Message) -> None:
        message.enable_async()
        pending.append(message)

    consumer = Consumer(
        TOPIC, CHANNEL, handle, nsqd_tcp_addresses=nsqd.tcp_address, max_in_flight=5
    )
    consumer.start()
    wait_until(lambda: len(pending) == 2, timeout=10)
    consumer.close(timeout=0.3)
    # nsqd would keep them in flight for its 60 s timeout: they must be requeued.
    wait_until(lambda: channel_stats(nsqd)["in_flight_count"] == 0, timeout=3)
    stats = channel_stats(nsqd)
    assert stats["depth"] == 2
    assert stats["requeue_count"] == 2
    assert stats["timeout_count"] == 0
    assert [m.finish() for m in pending] == [False, False]  # too late, and it says so


def test_starved_follows_rdy_changes(nsqd: NsqdServer, consumers: list[Consumer]) -> None:
    publish(nsqd, [b"s%d" % i for i in range(10)])
    held: list[Message] = []

    def handle(message: Message) -> None:
        message.enable_async()
        held.append(message)

    consumer = Consumer(
        TOPIC, CHANNEL, handle, nsqd_tcp_addresses=nsqd.tcp_address, max_in_flight=10
    )
    consumers.append(consumer)
    consumer.start()
    wait_until(lambda: len(held) == 10, timeout=10)
    assert consumer.starved.is_set()
    consumer.set_max_in_flight(100)  # 10 in flight of RDY 100: not starved any more
    assert not consumer.is_starved()
    assert not consumer.starved.is_set()
    consumer.set_max_in_flight(10)
    assert consumer.is_starved()
    assert consumer.starved.is_set()
    for message in held:
        message.finish()
    wait_until(lambda: drained(nsqd), timeout=10)


def test_close_while_subscribing_leaves_no_connection(nsqd: NsqdServer) -> None:
    proxy = SubProxy(nsqd.tcp_address, mode="hold").start()
    try:
        consumer = Consumer(
            TOPIC, CHANNEL, lambda m: None, nsqd_tcp_addresses=proxy.address, connect_timeout=30.0
        )
        consumer.start()
        # nsqd has the subscription; the client still waits for SUB's answer.
        wait_until(lambda: channel_stats(nsqd).get("client_count") == 1, timeout=10)
        started = time.monotonic()
        consumer.close(timeout=5.0)
        assert time.monotonic() - started < 5.0
        wait_until(lambda: channel_stats(nsqd)["client_count"] == 0, timeout=5)
    finally:
        proxy.stop()


def test_a_connection_lost_right_after_sub_is_reconnected(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    proxy = SubProxy(nsqd.tcp_address, mode="cut").start()
    try:
        seen: list[bytes] = []
        consumer = Consumer(
            TOPIC,
            CHANNEL,
            lambda m: seen.append(m.body),
            nsqd_tcp_addresses=proxy.address,
            reconnect_interval=0.05,
            max_reconnect_interval=0.2,
        )
        consumers.append(consumer)
        consumer.start()
        publish(nsqd, [b"after-the-cut"])
        wait_until(lambda: seen == [b"after-the-cut"], timeout=10)
        assert proxy.connections >= 2
        assert all(c.is_connected for c in consumer.connections)
    finally:
        proxy.stop()


def test_no_rdy_above_zero_after_cls_during_close(nsqd: NsqdServer) -> None:
    proxy = RecordingProxy(nsqd.tcp_address).start()
    try:
        publish(nsqd, [b"in-the-handler"])
        entered = gevent.event.Event()
        release = gevent.event.Event()

        def handle(message: Message) -> None:
            entered.set()
            release.wait(10)

        consumer = Consumer(
            TOPIC, CHANNEL, handle, nsqd_tcp_addresses=proxy.address, max_in_flight=1
        )
        consumer.start()
        assert entered.wait(10)
        closing = gevent.spawn(consumer.close, 5.0)
        assert proxy.wait_for(lambda: b"CLS" in proxy.lines())
        release.set()  # the handler finishes during the close: FIN, but no new RDY
        closing.get(timeout=10)
        lines = proxy.lines()
        after = lines[lines.index(b"CLS") :]
        assert any(line.startswith(b"FIN ") for line in after)
        assert [line for line in after if line.startswith(b"RDY")] == []
        assert lines[lines.index(b"CLS") - 1] == b"RDY 0"
        wait_until(lambda: drained(nsqd), timeout=5)
    finally:
        proxy.stop()


def test_a_lookupd_answering_garbage_is_skipped(
    nsq_cluster: Any, consumers: list[Consumer]
) -> None:
    bad = FakeLookupd(lambda: ("200 OK", b"")).start()  # 200 and no JSON document
    try:
        publish(nsq_cluster.nsqds[0], [b"found"])
        seen: list[bytes] = []
        consumer = Consumer(
            TOPIC,
            CHANNEL,
            lambda m: seen.append(m.body),
            lookupd_http_addresses=[bad.address, nsq_cluster.lookupd.http_address],
            lookupd_poll_interval=0.2,
        )
        consumers.append(consumer)
        consumer.start()
        wait_until(lambda: seen == [b"found"], timeout=10)
        wait_until(lambda: len(bad.requests) >= 3, timeout=5)  # polling goes on
    finally:
        bad.stop()


def test_query_lookupd_does_not_multiply_the_polls(consumers: list[Consumer]) -> None:
    empty = json.dumps({"channels": [], "producers": []}).encode()
    lookupd = FakeLookupd(lambda: ("200 OK", empty)).start()
    try:
        consumer = Consumer(
            TOPIC,
            CHANNEL,
            lambda m: None,
            lookupd_http_addresses=[lookupd.address],
            lookupd_poll_interval=0.3,
            lookupd_poll_jitter=0.0,
        )
        consumers.append(consumer)
        consumer.start()
        wait_until(lambda: len(lookupd.requests) == 1, timeout=5)
        for _ in range(4):
            consumer.query_lookupd()
        wait_until(lambda: len(lookupd.requests) >= 5, timeout=5)
        burst = len(lookupd.requests)
        wait_until(lambda: len(lookupd.requests) >= burst + 3, timeout=5)
        later = lookupd.requests[burst - 1 :]
        gaps = [b - a for a, b in itertools.pairwise(later)]
        assert min(gaps) >= 0.25, gaps  # one poll per interval, not one per query
    finally:
        lookupd.stop()


def consume_one_through_lookupd(
    nsq_cluster: Any, consumers: list[Consumer], **options: Any
) -> tuple[Consumer, list[bytes]]:
    """A consumer that found the cluster's first nsqd through lookupd and got b"one" from it."""
    publish(nsq_cluster.nsqds[0], [b"one"])
    seen: list[bytes] = []
    consumer = Consumer(
        TOPIC,
        CHANNEL,
        lambda m: seen.append(m.body),
        lookupd_http_addresses=[nsq_cluster.lookupd.http_address],
        **options,
    )
    consumers.append(consumer)
    consumer.start()
    wait_until(lambda: seen == [b"one"], timeout=10)
    return consumer, seen


def test_a_static_nsqd_first_reached_through_lookupd_still_reconnects(
    nsq_cluster: Any, consumers: list[Consumer]
) -> None:
    server = nsq_cluster.nsqds[0]
    consumer, seen = consume_one_through_lookupd(
        nsq_cluster,
        consumers,
        lookupd_poll_interval=0.2,
        reconnect_interval=0.1,
        max_reconnect_interval=0.5,
    )
    consumer.connect_to_nsqd(server.tcp_address)  # now a static address too
    nsq_cluster.lookupd.stop()  # discovery can no longer bring it back
    server.restart()
    publish(server, [b"two"])
    wait_until(lambda: seen == [b"one", b"two"], timeout=15)


def test_answering_after_the_connection_died_does_not_raise(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    proxy = RecordingProxy(nsqd.tcp_address).start()
    try:
        publish(nsqd, [b"async"])
        pending: list[Message] = []

        def handle(message: Message) -> None:
            message.enable_async()
            pending.append(message)

        consumer = Consumer(TOPIC, CHANNEL, handle, nsqd_tcp_addresses=proxy.address)
        consumers.append(consumer)
        consumer.start()
        wait_until(lambda: len(pending) == 1, timeout=10)
        (conn,) = consumer.connections
        proxy.cut()
        wait_until(lambda: conn.closed, timeout=5)
        pending[0].finish()  # nsqd redelivers it; answering must not blow up
        pending[0].touch()
        assert pending[0].has_responded
    finally:
        proxy.stop()


def test_a_handler_outliving_its_connection_keeps_its_worker(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    proxy = RecordingProxy(nsqd.tcp_address).start()
    try:
        publish(nsqd, [b"first"])
        entered = gevent.event.Event()
        release = gevent.event.Event()
        workers: list[tuple[bytes, object]] = []

        def handle(message: Message) -> None:
            if message.body == b"first":
                entered.set()
                release.wait(10)
            workers.append((message.body, gevent.getcurrent()))

        consumer = Consumer(
            TOPIC,
            CHANNEL,
            handle,
            nsqd_tcp_addresses=proxy.address,
            concurrency=1,
            reconnect_interval=0.05,
            max_reconnect_interval=0.2,
        )
        consumers.append(consumer)
        consumer.start()
        assert entered.wait(10)
        (conn,) = consumer.connections
        proxy.cut()
        wait_until(lambda: conn.closed, timeout=5)
        release.set()  # the handler returns; its FIN cannot be sent
        wait_until(lambda: len(workers) == 1, timeout=5)
        wait_until(lambda: any(c.is_connected for c in consumer.connections), timeout=10)
        publish(nsqd, [b"second"])
        wait_until(lambda: len(workers) == 2, timeout=10)
        assert workers[1] == (b"second", workers[0][1]), "the worker died on the dead FIN"
    finally:
        proxy.stop()


def test_close_from_inside_a_handler(nsqd: NsqdServer) -> None:
    publish(nsqd, [b"x1", b"x2", b"x3"])
    result: dict[str, Any] = {}

    def handle(message: Message) -> None:
        if "started" in result:
            return
        started = result["started"] = time.monotonic()
        consumer.close(timeout=10.0)  # the classic "stop after this one"
        result["took"] = time.monotonic() - started
        result["answered"] = message.finish()

    before = live_greenlets()
    consumer = Consumer(
        TOPIC, CHANNEL, handle, nsqd_tcp_addresses=nsqd.tcp_address, max_in_flight=3
    )
    consumer.start()
    wait_until(lambda: consumer.closed, timeout=15)
    wait_until(lambda: "answered" in result, timeout=5)
    assert result["took"] < 5.0  # it did not wait for itself
    assert result["answered"] is False  # close() requeued it: it could not finish first
    wait_until(lambda: channel_stats(nsqd)["in_flight_count"] == 0, timeout=3)
    wait_until(lambda: channel_stats(nsqd)["client_count"] == 0, timeout=3)
    assert channel_stats(nsqd)["timeout_count"] == 0
    wait_until(lambda: live_greenlets() <= before, timeout=5, message="consumer greenlets ended")


def test_a_static_nsqd_down_for_a_long_time_is_still_retried(
    consumers: list[Consumer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)  # one WARNING per failed attempt otherwise
    accepted = 0

    def hang_up(sock: gevent.socket.socket, _address: object) -> None:
        nonlocal accepted
        accepted += 1
        sock.close()

    server = gevent.server.StreamServer(("127.0.0.1", 0), hang_up)
    server.start()
    try:
        consumer = Consumer(
            TOPIC,
            CHANNEL,
            lambda m: None,
            nsqd_tcp_addresses=f"127.0.0.1:{server.server_port}",
            reconnect_interval=0.001,
            max_reconnect_interval=0.001,
        )
        consumers.append(consumer)
        consumer.start()
        # 2 ** 1024 no longer fits a float: the backoff must not stop there.
        wait_until(lambda: accepted > 1100, timeout=30, interval=0.1)
    finally:
        server.stop()


def test_connect_to_nsqd_again_does_not_multiply_the_retries(
    consumers: list[Consumer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    accepts: list[float] = []

    def hang_up(sock: gevent.socket.socket, _address: object) -> None:
        accepts.append(time.monotonic())
        sock.close()

    server = gevent.server.StreamServer(("127.0.0.1", 0), hang_up)
    server.start()
    try:
        address = f"127.0.0.1:{server.server_port}"
        consumer = Consumer(
            TOPIC,
            CHANNEL,
            lambda m: None,
            nsqd_tcp_addresses=address,
            reconnect_interval=0.4,
            max_reconnect_interval=0.4,
        )
        consumers.append(consumer)
        consumer.start()
        for count in range(1, 5):  # each call tries at once, while a retry is pending
            wait_until(partial(at_least, accepts, count), timeout=5)
            consumer.connect_to_nsqd(address)
        wait_until(lambda: len(accepts) >= 5, timeout=5)
        burst = len(accepts)
        wait_until(lambda: len(accepts) >= burst + 4, timeout=10)
        later = accepts[burst - 1 :]
        gaps = [b - a for a, b in itertools.pairwise(later)]
        assert min(gaps) >= 0.15, gaps  # one retry chain: 0.2-0.4 s apart
    finally:
        server.stop()


def test_a_dropped_nsqd_found_through_lookupd_is_rediscovered_at_once(
    nsq_cluster: Any, consumers: list[Consumer]
) -> None:
    server = nsq_cluster.nsqds[0]
    # The next scheduled poll is far away.
    consumer, seen = consume_one_through_lookupd(
        nsq_cluster, consumers, lookupd_poll_interval=600.0
    )
    (first,) = consumer.connections
    first.socket.shutdown(socket.SHUT_RDWR)  # the network drops it; nsqd stays listed
    wait_until(lambda: first.closed, timeout=5)
    wait_until(lambda: [c for c in consumer.connections if c is not first], timeout=5)
    publish(server, [b"two"])
    wait_until(lambda: seen == [b"one", b"two"], timeout=10)


def test_a_handler_timing_hook_that_raises_is_logged_and_the_workers_carry_on(
    nsqd: NsqdServer, consumers: list[Consumer], caplog: pytest.LogCaptureFixture
) -> None:
    """A faulty ``set_handler_timing`` hook costs a log line per call, not a worker.

    It runs in the worker after the message was answered; raising there once
    ended the worker greenlet each time (gevent printed the traceback to
    stderr, no log record) and a new one was spawned for the next message.
    """
    publish(nsqd, [b"%d" % i for i in range(20)])
    handled: list[bytes] = []

    def timing(seconds: float) -> None:
        raise ValueError("a metrics bug")

    consumer = Consumer(
        TOPIC,
        CHANNEL,
        lambda m: handled.append(m.body),
        nsqd_tcp_addresses=nsqd.tcp_address,
        concurrency=2,
    )
    consumer.set_handler_timing(timing)
    consumers.append(consumer)
    consumer.start()
    wait_until(
        lambda: len(handled) == 20 and drained(nsqd),
        timeout=10,
        message="all 20 handled and finished",
    )
    assert sorted(handled) == sorted(b"%d" % i for i in range(20))
    assert any("a metrics bug" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)
