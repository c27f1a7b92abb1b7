"""AUTH against nsqd with an auth server: accepted, refused, missing, never logged."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest
from test_conn import Subscriber

from gnsqlite.config import ConnectionConfig
from gnsqlite.connection import Connection
from gnsqlite.errors import (
    AuthFailedError,
    NegotiationError,
    NoConnectionsError,
    UnauthorizedError,
)
from gnsqlite.producer import Producer
from gnsqlite.testing import grant

SECRET = "open-sesame-7f3a"


def policy(remote_ip: str, tls: bool, secret: str) -> Mapping[str, Any] | None:
    if secret == SECRET:
        return grant(identity="alice", topic="^allowed", channels=[".*"])
    if secret == "read-only":
        return grant(identity="bob", permissions=["subscribe"])
    return None  # 403


@pytest.fixture
def auth_nsqd(nsqd_factory: Any, auth_server_factory: Any) -> Any:
    auth = auth_server_factory(policy)
    server = nsqd_factory(auth_http_addresses=[auth.address])
    server.auth = auth
    return server


def test_auth_accepted(auth_nsqd: Any) -> None:
    sub = Subscriber(auth_nsqd.tcp_address, "allowed", auth_secret=SECRET)
    conn = Connection(auth_nsqd.tcp_address, ConnectionConfig(auth_secret=SECRET))
    conn.connect()
    try:
        assert conn.identity is not None
        assert conn.identity["identity"] == "alice"
        assert conn.publish("allowed", b"hello").get(timeout=5) == b"OK"
        assert sub.wait_for(1) == [b"hello"]
        assert auth_nsqd.auth.requests[0]["secret"] == SECRET
    finally:
        conn.close()
        sub.close()


def test_auth_refused_by_the_auth_server(auth_nsqd: Any) -> None:
    conn = Connection(auth_nsqd.tcp_address, ConnectionConfig(auth_secret="wrong"))
    with pytest.raises(AuthFailedError) as info:
        conn.connect()
    assert auth_nsqd.tcp_address in str(info.value)
    assert info.value.code == "E_AUTH_FAILED"
    assert conn.closed


def test_auth_required_but_no_secret_given(auth_nsqd: Any) -> None:
    conn = Connection(auth_nsqd.tcp_address)
    with pytest.raises(NegotiationError, match="no auth_secret was given"):
        conn.connect()
    assert auth_nsqd.auth.requests == []


def test_publishing_without_the_permission_is_unauthorized(auth_nsqd: Any) -> None:
    with Producer(auth_nsqd.tcp_address, auth_secret="read-only") as producer:
        with pytest.raises(UnauthorizedError) as info:
            producer.publish("allowed", b"x")
        assert info.value.code == "E_UNAUTHORIZED"
    with Producer(auth_nsqd.tcp_address, auth_secret=SECRET) as producer:
        with pytest.raises(UnauthorizedError):
            producer.publish("elsewhere", b"x")  # alice may publish to ^allowed only
        producer.publish("allowed", b"x")


def test_a_producer_with_a_refused_secret_names_the_error(auth_nsqd: Any) -> None:
    producer = Producer(auth_nsqd.tcp_address, auth_secret="wrong", timeout=0.5)
    producer.start()
    try:
        with pytest.raises(NoConnectionsError) as info:
            producer.publish("allowed", b"x")
        (error,) = info.value.errors.values()
        assert isinstance(error, AuthFailedError)
    finally:
        producer.close()


def test_the_secret_never_appears_in_logs_or_reprs(
    auth_nsqd: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    config = ConnectionConfig(auth_secret=SECRET)
    with Producer(auth_nsqd.tcp_address, connection_config=config) as producer:
        producer.publish("allowed", b"x")
        (conn,) = producer.connections
        texts = [repr(config), str(config), repr(producer), repr(conn), repr(conn.features)]
    failing = Producer(auth_nsqd.tcp_address, auth_secret=SECRET + "-wrong", timeout=0.3)
    failing.start()
    try:
        with pytest.raises(NoConnectionsError) as info:
            failing.publish("allowed", b"x")
        texts.append(str(info.value))
    finally:
        failing.close()
    assert caplog.records  # the connections did log
    for text in [*texts, caplog.text]:
        assert SECRET not in text
