"""Connection against a running nsqd (the embedded broker, or the real one).

Every test observes nsqd only through the TCP protocol and the HTTP API, so
it passes against both implementations (``GNSQLITE_NSQD`` selects the real
one). The "consumer" is a :class:`Connection` subscribed with ``SUB`` and
``RDY`` whose ``on_message`` finishes each message.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gevent
import gevent.event
import pytest

from gnsqlite.config import ConnectionConfig
from gnsqlite.connection import Connection
from gnsqlite.errors import NegotiationError
from gnsqlite.protocol import WireMessage
from gnsqlite.testing.waiting import wait_until


class Subscriber:
    """A Connection subscribed to ``topic``/``channel``, collecting message bodies."""

    def __init__(
        self, address: str, topic: str, channel: str = "ch", rdy: int = 200, **options: Any
    ) -> None:
        self.bodies: list[bytes] = []
        self.arrived: list[float] = []
        self.changed = gevent.event.Event()
        self.conn = Connection(address, ConnectionConfig(**options), on_message=self._on_message)
        self.conn.connect()
        self.conn.subscribe(topic, channel, timeout=5)
        self.conn.ready(rdy)

    def _on_message(self, conn: Connection, message: WireMessage) -> None:
        self.bodies.append(message.body)
        self.arrived.append(time.monotonic())
        conn.finish(message.id)
        self.changed.set()

    def wait_for(self, count: int, timeout: float = 10.0) -> list[bytes]:
        wait_until(lambda: len(self.bodies) >= count, timeout=timeout)
        return self.bodies

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def subscribers() -> Iterator[list[Subscriber]]:
    made: list[Subscriber] = []
    yield made
    for sub in made:
        sub.close()


def connect(address: str, **options: Any) -> Connection:
    conn = Connection(address, ConnectionConfig(**options))
    conn.connect()
    return conn


def roundtrip(conn: Connection, sub: Subscriber, bodies: list[bytes]) -> None:
    """Publish ``bodies`` on ``conn`` (one PUB and one MPUB) and see them arrive."""
    assert conn.publish("rt", bodies[0]).get(timeout=5) == b"OK"
    assert conn.multi_publish("rt", bodies[1:]).get(timeout=5) == b"OK"
    assert sorted(sub.wait_for(len(bodies))) == sorted(bodies)


def test_pub_mpub_and_dpub_reach_a_subscriber(nsqd: Any, subscribers: list[Subscriber]) -> None:
    sub = Subscriber(nsqd.tcp_address, "events")
    subscribers.append(sub)
    conn = connect(nsqd.tcp_address)
    try:
        published = time.monotonic()
        assert conn.deferred_publish("events", 0.5, b"deferred").get(timeout=5) == b"OK"
        assert conn.publish("events", b"one").get(timeout=5) == b"OK"
        assert conn.multi_publish("events", [b"two", "thrée"]).get(timeout=5) == b"OK"
        bodies = sub.wait_for(4)
        assert bodies[:3] == [b"one", b"two", "thrée".encode()]
        assert bodies[3] == b"deferred"
        assert sub.arrived[3] - published >= 0.45
    finally:
        conn.close()
    assert conn.join(1)


def test_negotiated_values_are_kept(nsqd_factory: Any) -> None:
    server = nsqd_factory(max_rdy_count=77, max_msg_timeout=120.0)
    conn = connect(server.tcp_address, msg_timeout=5.0)
    try:
        assert conn.max_rdy_count == 77
        assert conn.msg_timeout == 5.0
        assert conn.max_msg_timeout == 120.0
        assert conn.features["version"]
    finally:
        conn.close()


def test_close_sends_cls_and_leaves_nothing_running(nsqd: Any) -> None:
    sub = Subscriber(nsqd.tcp_address, "closing")
    conn = sub.conn
    assert conn.is_connected
    conn.close(timeout=5)
    assert conn.wait_close_wait(0)  # nsqd answered CLS with CLOSE_WAIT
    assert conn.closed
    assert conn.join(0)
    # nsqd forgets the client once the socket is shut.
    wait_until(
        lambda: not any(c["clients"] for t in nsqd.stats()["topics"] for c in t["channels"]),
        timeout=5,
    )


# -- TLS -----------------------------------------------------------------------


@pytest.fixture
def tls_nsqd(nsqd_factory: Any, tls_files: Any) -> Any:
    return nsqd_factory(tls_cert=tls_files.cert_file, tls_key=tls_files.key_file)


def test_tls_with_a_trusted_ca(tls_nsqd: Any, tls_files: Any) -> None:
    sub = Subscriber(tls_nsqd.tcp_address, "rt", tls_v1=True, tls_ca_file=tls_files.ca_file)
    conn = connect(tls_nsqd.tcp_address, tls_v1=True, tls_ca_file=tls_files.ca_file)
    try:
        assert conn.tls and sub.conn.tls
        roundtrip(conn, sub, [b"secret-%d" % i for i in range(20)])
    finally:
        conn.close()
        sub.close()


def test_tls_verification_is_on_by_default(tls_nsqd: Any) -> None:
    conn = Connection(tls_nsqd.tcp_address, ConnectionConfig(tls_v1=True))
    with pytest.raises(NegotiationError, match="certificate verify failed") as info:
        conn.connect()
    assert tls_nsqd.tcp_address in str(info.value)
    assert isinstance(info.value.__cause__, ssl.SSLError)
    assert conn.closed


def test_tls_verification_can_be_turned_off_explicitly(tls_nsqd: Any) -> None:
    conn = connect(tls_nsqd.tcp_address, tls_v1=True, tls_verify=False)
    try:
        assert conn.tls
        assert conn.publish("t", b"x").get(timeout=5) == b"OK"
    finally:
        conn.close()


def test_tls_with_a_context_the_user_built(tls_nsqd: Any, tls_files: Any) -> None:
    context = ssl.create_default_context(cafile=tls_files.ca_file)  # a stdlib context
    conn = connect(tls_nsqd.tcp_address, tls_v1=True, tls_context=context)
    try:
        assert conn.tls
        assert conn.publish("t", b"x").get(timeout=5) == b"OK"
    finally:
        conn.close()


def test_tls_checks_the_hostname(nsqd_factory: Any, tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("nsqd.other.example")  # not 127.0.0.1
    ca_file, cert_file, key_file = (str(tmp_path / n) for n in ("ca.pem", "c.pem", "c.key"))
    ca.cert_pem.write_to_path(ca_file)
    cert.cert_chain_pems[0].write_to_path(cert_file)
    cert.private_key_pem.write_to_path(key_file)
    server = nsqd_factory(tls_cert=cert_file, tls_key=key_file)
    conn = Connection(server.tcp_address, ConnectionConfig(tls_v1=True, tls_ca_file=ca_file))
    with pytest.raises(NegotiationError, match=r"certificate verify failed: IP address mismatch"):
        conn.connect()


def test_tls_with_a_client_certificate(nsqd_factory: Any, tls_files: Any) -> None:
    server = nsqd_factory(
        tls_cert=tls_files.cert_file,
        tls_key=tls_files.key_file,
        tls_root_ca_file=tls_files.ca_file,
        tls_client_auth_policy="require-verify",
    )
    conn = connect(
        server.tcp_address,
        tls_v1=True,
        tls_ca_file=tls_files.ca_file,
        tls_cert_file=tls_files.client_cert_file,
        tls_key_file=tls_files.client_key_file,
    )
    try:
        assert conn.tls
        assert conn.publish("t", b"x").get(timeout=5) == b"OK"
    finally:
        conn.close()


def test_tls_asked_of_an_nsqd_without_tls_is_an_error(nsqd: Any) -> None:
    conn = Connection(nsqd.tcp_address, ConnectionConfig(tls_v1=True))
    with pytest.raises(NegotiationError, match="TLS"):
        conn.connect()
    assert conn.closed


@pytest.mark.parametrize("compression", ["snappy", "deflate"])
def test_tls_then_compression(
    tls_nsqd: Any, tls_files: Any, compression: str, subscribers: list[Subscriber]
) -> None:
    options = {"tls_v1": True, "tls_ca_file": tls_files.ca_file, compression: True}
    sub = Subscriber(tls_nsqd.tcp_address, "rt", **options)
    subscribers.append(sub)
    conn = connect(tls_nsqd.tcp_address, **options)
    try:
        assert conn.tls and conn.compression == compression
        roundtrip(conn, sub, [b"z" * 100_000, b"a", b"b" * 70_000])
    finally:
        conn.close()


# -- compression ----------------------------------------------------------------


def test_snappy(nsqd_factory: Any, subscribers: list[Subscriber]) -> None:
    server = nsqd_factory(snappy=True)
    sub = Subscriber(server.tcp_address, "rt", snappy=True)
    subscribers.append(sub)
    conn = connect(server.tcp_address, snappy=True)
    try:
        assert conn.compression == "snappy" and sub.conn.compression == "snappy"
        bodies = [bytes(range(256)) * 800, b"small", b"q" * 65536, b"r" * 65537]
        roundtrip(conn, sub, bodies)
    finally:
        conn.close()


def test_deflate_at_the_negotiated_level(nsqd_factory: Any, subscribers: list[Subscriber]) -> None:
    server = nsqd_factory(deflate=True, max_deflate_level=3)
    sub = Subscriber(server.tcp_address, "rt", deflate=True, deflate_level=9)
    subscribers.append(sub)
    conn = connect(server.tcp_address, deflate=True, deflate_level=9)
    try:
        assert conn.compression == "deflate"
        assert conn.features["deflate_level"] == 3
        roundtrip(conn, sub, [b"deflate me " * 5000, b"x", bytes(range(256)) * 300])
    finally:
        conn.close()


def test_compression_the_server_does_not_offer_falls_back_to_plain(nsqd_factory: Any) -> None:
    server = nsqd_factory(snappy=False)
    conn = connect(server.tcp_address, snappy=True)
    try:
        assert conn.compression is None
        assert conn.publish("t", b"x").get(timeout=5) == b"OK"
    finally:
        conn.close()
