"""gnsq (gevent) against the broker: a second client nobody here wrote.

gnsq does not monkey-patch (checked below), so it runs in the test process on
the test thread's hub; the broker runs in a child process via the fixtures
(the real nsqd with GNSQLITE_NSQD).
"""

from __future__ import annotations

import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import gevent
import gnsq
import gnsq.errors
import gnsq.protocol
import pytest
from interop_support import channel_stats

from gnsqlite.testing import AuthServer, NsqdServer, TLSFiles, grant, wait_until
from gnsqlite.testing.plugin import NsqCluster

pytestmark = pytest.mark.interop

NsqdFactory = Callable[..., NsqdServer]
TOPIC = "gnsq_interop"
CHANNEL = "ch"


def test_importing_gnsq_patches_nothing() -> None:
    code = "import gnsq, gevent.monkey; print(gevent.monkey.is_anything_patched())"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    )
    assert out.stdout.strip() == "False"


class Received:
    def __init__(self) -> None:
        self.messages: list[gnsq.Message] = []
        self.times: list[float] = []

    def record(self, message: gnsq.Message) -> None:
        self.messages.append(message)
        self.times.append(time.monotonic())

    @property
    def bodies(self) -> list[bytes]:
        return [m.body for m in self.messages]


@contextmanager
def consuming(
    nsqd: NsqdServer, handler: Callable[[Any, gnsq.Message], None], **kwargs: Any
) -> Iterator[gnsq.Consumer]:
    consumer = gnsq.Consumer(
        kwargs.pop("topic", TOPIC),
        CHANNEL,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=kwargs.pop("max_in_flight", 10),
        **kwargs,
    )
    consumer.on_message.connect(handler, weak=False)
    consumer.start(block=False)
    try:
        yield consumer
    finally:
        consumer.close()
        consumer.join(timeout=2)


def finishing(received: Received) -> Callable[[Any, gnsq.Message], None]:
    def handler(consumer: Any, message: gnsq.Message) -> None:
        received.record(message)  # gnsq finishes it when the handler returns

    return handler


@contextmanager
def producing(nsqd: NsqdServer, **kwargs: Any) -> Iterator[gnsq.Producer]:
    producer = gnsq.Producer([nsqd.tcp_address], **kwargs)
    producer.start()
    try:
        yield producer
    finally:
        producer.close()
        producer.join(timeout=2)


def publish_raw(nsqd: NsqdServer, topic: str, bodies: list[bytes], **kwargs: Any) -> bytes:
    """Publish with gnsq's connection class (one MPUB), returning nsqd's answer.

    gnsq's Producer cannot negotiate TLS, snappy or deflate: the OK that
    follows each upgrade reaches its response queue before the queue exists
    (KeyError; wtolson/gnsq#25), so upgraded publishing uses NsqdTCPClient.
    """
    host, port = nsqd.tcp_address.rsplit(":", 1)
    conn = gnsq.NsqdTCPClient(host, int(port), **kwargs)
    conn.connect()
    try:
        conn.identify()
        conn.multipublish(topic, bodies)
        frame, data = conn.read_response()
        assert frame == gnsq.protocol.FRAME_TYPE_RESPONSE
        return bytes(data)
    finally:
        conn.close_stream()


def wait_channel(
    nsqd: NsqdServer, check: Callable[[dict[str, Any]], bool], topic: str = TOPIC
) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        stats = channel_stats(nsqd.stats(topic=topic), topic, CHANNEL)
        return stats if stats is not None and check(stats) else None

    found = wait_until(probe, timeout=10, message="channel stats")
    assert found is not None  # wait_until returns only a truthy value
    return found


def test_publish_multipublish_and_consume(nsqd: NsqdServer) -> None:
    with producing(nsqd) as producer:
        assert producer.publish(TOPIC, b"one") == b"OK"
        assert producer.multipublish(TOPIC, [b"two", b"three"]) == b"OK"
    received = Received()
    with consuming(nsqd, finishing(received)):
        wait_until(lambda: len(received.messages) == 3, timeout=10)
        assert received.bodies == [b"one", b"two", b"three"]
        assert [m.attempts for m in received.messages] == [1, 1, 1]
        stats = wait_channel(nsqd, lambda c: c["in_flight_count"] == 0)
        assert stats["message_count"] == 3
        assert stats["depth"] == 0


def test_deferred_publish(nsqd: NsqdServer) -> None:
    nsqd.http.create_topic(TOPIC)
    nsqd.http.create_channel(TOPIC, CHANNEL)
    with producing(nsqd) as producer:
        published = time.monotonic()
        assert producer.publish(TOPIC, b"later", defer=1000) == b"OK"
    stats = channel_stats(nsqd.stats(topic=TOPIC), TOPIC, CHANNEL)
    assert stats is not None and stats["deferred_count"] == 1
    received = Received()
    with consuming(nsqd, finishing(received)):
        wait_until(lambda: received.messages, timeout=10)
        assert received.times[0] - published >= 0.9


def test_requeue_with_delay(nsqd: NsqdServer) -> None:
    received = Received()
    requeued_at: list[float] = []

    def handler(consumer: Any, message: gnsq.Message) -> None:
        message.enable_async()
        received.record(message)
        if message.attempts == 1:
            message.requeue(time_ms=1000, backoff=False)
            requeued_at.append(time.monotonic())
        else:
            message.finish()

    nsqd.http.pub(TOPIC, b"again")
    with consuming(nsqd, handler):
        wait_until(lambda: requeued_at, timeout=10)
        stats = wait_channel(nsqd, lambda c: c["deferred_count"] == 1)
        assert stats["requeue_count"] == 1
        wait_until(lambda: len(received.messages) == 2, timeout=10)
        first, second = received.messages
        assert first.id == second.id
        assert (first.attempts, second.attempts) == (1, 2)
        assert received.times[1] - requeued_at[0] >= 0.9


def test_timeouts_redeliver_with_attempts_counted(nsqd_factory: NsqdFactory) -> None:
    nsqd = nsqd_factory(msg_timeout=0.5)
    received = Received()

    def handler(consumer: Any, message: gnsq.Message) -> None:
        message.enable_async()
        received.record(message)
        if message.attempts >= 3:
            message.finish()

    nsqd.http.pub(TOPIC, b"slow")
    with consuming(nsqd, handler, max_in_flight=1):
        wait_until(lambda: len(received.messages) == 3, timeout=10)
        assert [m.attempts for m in received.messages] == [1, 2, 3]
        assert len({m.id for m in received.messages}) == 1
        stats = wait_channel(nsqd, lambda c: c["in_flight_count"] == 0)
        assert stats["timeout_count"] == 2


def test_touch_extends_the_timeout(nsqd_factory: NsqdFactory) -> None:
    nsqd = nsqd_factory(msg_timeout=0.5)
    received = Received()
    touches: list[float] = []

    def work(message: gnsq.Message) -> None:
        for _ in range(5):  # 5 x 0.2 s: twice the 0.5 s timeout
            gevent.sleep(0.2)
            message.touch()
            touches.append(time.monotonic())
        message.finish()

    def handler(consumer: Any, message: gnsq.Message) -> None:
        message.enable_async()
        received.record(message)
        workers.append(gevent.spawn(work, message))

    workers: list[gevent.Greenlet[..., None]] = []
    nsqd.http.pub(TOPIC, b"long job")
    with consuming(nsqd, handler):
        stats = wait_channel(
            nsqd,
            lambda c: len(touches) == 5 and c["in_flight_count"] == 0,
        )
        assert len(received.messages) == 1
        assert stats["timeout_count"] == 0
        assert stats["message_count"] == 1
    gevent.joinall(workers, timeout=2)


def test_heartbeats_keep_an_idle_connection_open(nsqd: NsqdServer) -> None:
    heartbeats: list[float] = []
    received = Received()
    with consuming(nsqd, finishing(received), heartbeat_interval=1) as consumer:
        consumer.on_response.connect(
            lambda sender, response: (
                heartbeats.append(time.monotonic()) if response == b"_heartbeat_" else None
            ),
            weak=False,
        )
        wait_until(lambda: len(heartbeats) >= 2, timeout=10)
        assert len(consumer._connections) == 1
        nsqd.http.pub(TOPIC, b"still there")
        wait_until(lambda: received.messages, timeout=5)


def test_tls_with_verified_certificates(nsqd_factory: NsqdFactory, tls_files: TLSFiles) -> None:
    nsqd = nsqd_factory(tls_cert=tls_files.cert_file, tls_key=tls_files.key_file)
    tls = {
        "tls_v1": True,
        "tls_options": {"ca_certs": tls_files.ca_file, "cert_reqs": ssl.CERT_REQUIRED},
    }
    assert publish_raw(nsqd, TOPIC, [b"secret"], **tls) == b"OK"
    received = Received()
    with consuming(nsqd, finishing(received), **tls):
        wait_until(lambda: received.messages, timeout=10)
        assert received.bodies == [b"secret"]
        stats = wait_channel(nsqd, lambda c: bool(c["clients"]))
        assert stats["clients"][0]["tls"] is True


@pytest.mark.parametrize(
    ("feature", "options"),
    [("snappy", {"snappy": True}), ("deflate", {"deflate": True, "deflate_level": 6})],
)
def test_compression(nsqd: NsqdServer, feature: str, options: dict[str, Any]) -> None:
    bodies = [b"x" * 1000, b"compressible " * 100]
    assert publish_raw(nsqd, TOPIC, bodies, **options) == b"OK"
    received = Received()
    with consuming(nsqd, finishing(received), **options):
        wait_until(lambda: len(received.messages) == 2, timeout=10)
        assert received.bodies == bodies
        stats = wait_channel(nsqd, lambda c: bool(c["clients"]))
        assert stats["clients"][0][feature] is True


def test_auth_accepted_and_unauthorized_topic(
    nsqd_factory: NsqdFactory, auth_server_factory: Callable[..., AuthServer]
) -> None:
    auth = auth_server_factory(
        lambda remote_ip, tls, secret: (
            grant(identity="bob", topic=f"^{TOPIC}$") if secret == "s3cret" else None
        )
    )
    nsqd = nsqd_factory(auth_http_address=auth.address)
    with producing(nsqd, auth_secret=b"s3cret") as producer:
        assert producer.publish(TOPIC, b"authorized") == b"OK"
        with pytest.raises(gnsq.errors.NSQUnauthorized):
            producer.publish("elsewhere", b"not authorized")
    received = Received()
    with consuming(nsqd, finishing(received), auth_secret=b"s3cret"):
        wait_until(lambda: received.messages, timeout=10)
        stats = wait_channel(nsqd, lambda c: bool(c["clients"]))
        assert stats["clients"][0]["auth_identity"] == "bob"


def test_auth_refused(
    nsqd_factory: NsqdFactory, auth_server_factory: Callable[..., AuthServer]
) -> None:
    auth = auth_server_factory(lambda remote_ip, tls, secret: None)
    nsqd = nsqd_factory(auth_http_address=auth.address)
    host, port = nsqd.tcp_address.rsplit(":", 1)
    conn = gnsq.NsqdTCPClient(host, int(port), auth_secret=b"wrong")
    conn.connect()
    try:
        with pytest.raises(gnsq.errors.NSQAuthFailed):
            conn.identify()
    finally:
        conn.close_stream()
    assert [q["secret"] for q in auth.requests] == ["wrong"]


def test_consumer_discovers_every_nsqd_through_lookupd(nsq_cluster: NsqCluster) -> None:
    for index, server in enumerate(nsq_cluster.nsqds):
        server.http.pub(TOPIC, f"from {index}".encode())
    lookupd = nsq_cluster.lookupd.http
    wait_until(lambda: len(lookupd.producer_addresses(TOPIC)) == 3, timeout=10)
    received = Received()
    consumer = gnsq.Consumer(
        TOPIC,
        CHANNEL,
        lookupd_http_addresses=[f"http://{nsq_cluster.lookupd.http_address}"],
        max_in_flight=10,
    )
    consumer.on_message.connect(finishing(received), weak=False)
    consumer.start(block=False)
    try:
        wait_until(lambda: len(received.messages) == 3, timeout=10)
        assert sorted(received.bodies) == [b"from 0", b"from 1", b"from 2"]
    finally:
        consumer.close()
        consumer.join(timeout=2)
