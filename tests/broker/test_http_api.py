"""The embedded broker's HTTP API: nsqd v1.x routes, shapes and error codes."""

from __future__ import annotations

import http.client
import json
import struct
from typing import Any

import gevent.socket
import pytest
from nsqd_raw import RawClient

from gnsqlite.broker import Broker
from gnsqlite.net import parse_address

pytestmark = pytest.mark.embedded_only


class GeventHTTPConnection(http.client.HTTPConnection):
    """http.client over a gevent socket, so the in-process broker keeps running."""

    def connect(self) -> None:
        self.sock = gevent.socket.create_connection((self.host, self.port), self.timeout)


def request(
    broker: Broker, method: str, path: str, body: bytes | None = None
) -> tuple[int, bytes, dict[str, str]]:
    assert broker.http_address is not None
    host, port = parse_address(broker.http_address)
    conn = GeventHTTPConnection(host, port, timeout=5)
    try:
        conn.request(method, path, body=body)
        response = conn.getresponse()
        return response.status, response.read(), dict(response.getheaders())
    finally:
        conn.close()


def get_json(broker: Broker, path: str) -> Any:
    status, body, _ = request(broker, "GET", path)
    assert status == 200, body
    return json.loads(body)


def test_ping(broker: Broker) -> None:
    status, body, headers = request(broker, "GET", "/ping")
    assert (status, body) == (200, b"OK")
    # nsqd's /ping is PlainText: no X-NSQ-Content-Type (every V1 route has it)
    assert "X-NSQ-Content-Type" not in headers
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert request(broker, "GET", "/info")[2]["X-NSQ-Content-Type"] == "nsq; version=1.0"


def test_info(broker: Broker) -> None:
    info = get_json(broker, "/info")
    assert info["version"] == broker.version
    assert info["broadcast_address"] == "127.0.0.1"
    assert info["tcp_port"] == broker.tcp_port
    assert info["http_port"] == broker.http_port
    assert isinstance(info["start_time"], int)


def test_pub_and_stats_shape(broker: Broker) -> None:
    assert request(broker, "POST", "/pub?topic=t", b"hello")[:2] == (200, b"OK")
    assert request(broker, "POST", "/channel/create?topic=t&channel=ch")[0] == 200
    assert broker.tcp_address is not None
    with RawClient(broker.tcp_address) as c:
        c.negotiate(client_id="me", hostname="box", user_agent="test/1.0")
        c.sub("t", "ch", rdy=1)
        request(broker, "POST", "/pub?topic=t", b"second")
        c.message()
        stats = get_json(broker, "/stats?format=json")
    assert list(stats) == ["version", "health", "start_time", "topics", "memory", "producers"]
    assert stats["health"] == "OK"
    [topic] = stats["topics"]
    assert topic["topic_name"] == "t"
    assert topic["message_count"] == 2
    for key in ("depth", "backend_depth", "paused", "channels", "e2e_processing_latency"):
        assert key in topic
    [channel] = topic["channels"]
    assert channel["channel_name"] == "ch"
    assert channel["in_flight_count"] == 1
    assert channel["depth"] == 1  # "hello" went to ch when it was created; RDY 1 is taken
    assert channel["client_count"] == 1
    for key in ("backend_depth", "deferred_count", "requeue_count", "timeout_count", "paused"):
        assert key in channel
    [client] = channel["clients"]
    assert client["client_id"] == "me"
    assert client["hostname"] == "box"
    assert client["user_agent"] == "test/1.0"
    assert client["state"] == 3
    assert client["ready_count"] == 1
    assert client["in_flight_count"] == 1
    for key in (
        "version",
        "remote_address",
        "message_count",
        "finish_count",
        "requeue_count",
        "connect_ts",
        "sample_rate",
        "deflate",
        "snappy",
        "tls",
    ):
        assert key in client


def test_stats_filters_and_producers(broker: Broker) -> None:
    assert broker.tcp_address is not None
    with RawClient(broker.tcp_address) as p:
        p.pub("a", b"1")
        p.pub("b", b"2")
        request(broker, "POST", "/channel/create?topic=a&channel=x")
        request(broker, "POST", "/channel/create?topic=a&channel=y")
        stats = get_json(broker, "/stats?format=json&topic=a&channel=y")
        assert [t["topic_name"] for t in stats["topics"]] == ["a"]
        assert [c["channel_name"] for c in stats["topics"][0]["channels"]] == ["y"]
        [producer] = get_json(broker, "/stats?format=json")["producers"]
        # nsqd v1.2/v1.3 reports a single pub_counts entry (its loop breaks after one)
        [entry] = producer["pub_counts"]
        assert entry in ({"topic": "a", "count": 1}, {"topic": "b", "count": 1})
        [producer] = get_json(broker, "/stats?format=json&topic=b")["producers"]
        assert producer["pub_counts"] == [{"topic": "b", "count": 1}]
    # an unknown topic: nsqd's GetStats returns early, both lists are nil
    nope = get_json(broker, "/stats?format=json&topic=nope")
    assert (nope["topics"], nope["producers"]) == (None, None)
    status, text, _ = request(broker, "GET", "/stats")
    assert status == 200 and b"[a" in text


def test_pub_defer(broker: Broker) -> None:
    assert request(broker, "POST", "/channel/create?topic=t&channel=ch")[0] == 404
    request(broker, "POST", "/topic/create?topic=t")
    request(broker, "POST", "/channel/create?topic=t&channel=ch")
    assert request(broker, "POST", "/pub?topic=t&defer=5000", b"later")[0] == 200
    channel = get_json(broker, "/stats?format=json")["topics"][0]["channels"][0]
    assert (channel["deferred_count"], channel["depth"]) == (1, 0)


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "message"),
    [
        ("POST", "/pub", b"x", 400, "MISSING_ARG_TOPIC"),
        ("POST", "/pub?topic=bad!", b"x", 400, "INVALID_TOPIC"),
        ("POST", "/pub?topic=t", b"", 400, "MSG_EMPTY"),
        ("POST", "/pub?topic=t&defer=abc", b"x", 400, "INVALID_DEFER"),
        ("POST", "/pub?topic=t&defer=-1", b"x", 400, "INVALID_DEFER"),
        ("POST", "/pub?topic=t", b"x" * 101, 413, "MSG_TOO_BIG"),
        ("POST", "/mpub?topic=t", b"ok\n" + b"x" * 101, 413, "MSG_TOO_BIG"),
        ("POST", "/mpub?topic=t&binary=true", struct.pack(">i", 0), 413, "BAD_BODY"),
        ("GET", "/pub?topic=t", None, 405, "METHOD_NOT_ALLOWED"),
        ("GET", "/nowhere", None, 404, "NOT_FOUND"),
        ("POST", "/topic/delete?topic=nope", None, 404, "TOPIC_NOT_FOUND"),
        ("POST", "/topic/empty?topic=nope", None, 404, "TOPIC_NOT_FOUND"),
        ("POST", "/topic/pause?topic=nope", None, 404, "TOPIC_NOT_FOUND"),
        ("POST", "/topic/create", None, 400, "MISSING_ARG_TOPIC"),
        ("POST", "/topic/create?topic=a%20b", None, 400, "INVALID_TOPIC"),
        ("POST", "/channel/create?topic=t", None, 400, "MISSING_ARG_CHANNEL"),
        ("POST", "/channel/create?topic=t&channel=b@d", None, 400, "INVALID_ARG_CHANNEL"),
        ("POST", "/channel/create?topic=b@d&channel=c", None, 400, "INVALID_ARG_TOPIC"),
        ("POST", "/channel/delete?topic=nope&channel=c", None, 404, "TOPIC_NOT_FOUND"),
    ],
)
def test_errors(
    make_broker: Any, method: str, path: str, body: bytes | None, status: int, message: str
) -> None:
    broker = make_broker(max_msg_size=100)
    got_status, got_body, headers = request(broker, method, path, body)
    assert (got_status, json.loads(got_body)) == (status, {"message": message})
    assert headers["Content-Type"].startswith("application/json")


def test_channel_not_found(broker: Broker) -> None:
    request(broker, "POST", "/topic/create?topic=t")
    for action in ("delete", "empty", "pause", "unpause"):
        status, body, _ = request(broker, "POST", f"/channel/{action}?topic=t&channel=c")
        assert (status, json.loads(body)) == (404, {"message": "CHANNEL_NOT_FOUND"})


def test_mpub_text_and_binary(broker: Broker) -> None:
    assert request(broker, "POST", "/mpub?topic=t", b"a\nb\n\nc")[:2] == (200, b"OK")
    payload = struct.pack(">i", 2) + struct.pack(">i", 1) + b"d" + struct.pack(">i", 2) + b"ef"
    assert request(broker, "POST", "/mpub?topic=t&binary=true", payload)[:2] == (200, b"OK")
    assert [m.body for m in broker.topics["t"].held] == [b"a", b"b", b"c", b"d", b"ef"]


def test_topic_and_channel_administration(broker: Broker) -> None:
    events: list[tuple[str, str, str | None]] = []
    broker.add_listener(lambda *e: events.append(e))
    for path in ("/topic/create?topic=t", "/channel/create?topic=t&channel=c"):
        assert request(broker, "POST", path)[:2] == (200, b"")
    request(broker, "POST", "/pub?topic=t", b"x")
    assert request(broker, "POST", "/channel/pause?topic=t&channel=c")[0] == 200
    stats = get_json(broker, "/stats?format=json")["topics"][0]
    assert stats["channels"][0]["paused"] is True
    assert stats["channels"][0]["depth"] == 1
    request(broker, "POST", "/channel/unpause?topic=t&channel=c")
    request(broker, "POST", "/channel/empty?topic=t&channel=c")
    stats = get_json(broker, "/stats?format=json")["topics"][0]
    assert (stats["channels"][0]["paused"], stats["channels"][0]["depth"]) == (False, 0)
    request(broker, "POST", "/topic/pause?topic=t")
    request(broker, "POST", "/pub?topic=t", b"held")
    stats = get_json(broker, "/stats?format=json")["topics"][0]
    assert (stats["paused"], stats["depth"], stats["channels"][0]["depth"]) == (True, 1, 0)
    request(broker, "POST", "/topic/unpause?topic=t")
    stats = get_json(broker, "/stats?format=json")["topics"][0]
    assert (stats["depth"], stats["channels"][0]["depth"]) == (0, 1)
    request(broker, "POST", "/channel/delete?topic=t&channel=c")
    request(broker, "POST", "/topic/delete?topic=t")
    assert get_json(broker, "/stats?format=json")["topics"] == []
    assert events == [
        ("REGISTER", "t", None),
        ("REGISTER", "t", "c"),
        ("UNREGISTER", "t", "c"),
        ("UNREGISTER", "t", None),
    ]


def test_deleting_a_channel_closes_its_clients(broker: Broker) -> None:
    assert broker.tcp_address is not None
    with RawClient(broker.tcp_address) as c:
        c.sub("t", "c")
        assert request(broker, "POST", "/channel/delete?topic=t&channel=c")[0] == 200
        c.assert_closed()


def test_topic_empty_drops_held_messages(broker: Broker) -> None:
    request(broker, "POST", "/pub?topic=t", b"x")
    assert request(broker, "POST", "/topic/empty?topic=t")[0] == 200
    assert get_json(broker, "/stats?format=json")["topics"][0]["depth"] == 0
