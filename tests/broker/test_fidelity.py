"""Details where the embedded broker must answer exactly as nsqd v1.2/v1.3 does.

Each test states what nsqd's source does (``nsqd/stats.go``, ``nsqd/http.go``,
``nsqd/client_v2.go``) and holds against a real nsqd as well.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
from nsqd_raw import RawClient
from test_http_api import GeventHTTPConnection, get_json, request

from gnsqlite.broker import Broker
from gnsqlite.broker.lookupd import Lookupd
from gnsqlite.http import LookupdClient
from gnsqlite.http_transport import http_request
from gnsqlite.testing.waiting import wait_until

pytestmark = pytest.mark.embedded_only


def raw(broker: Broker) -> RawClient:
    assert broker.tcp_address is not None
    return RawClient(broker.tcp_address)


def topic_names(stats: dict[str, Any]) -> list[str]:
    return [t["topic_name"] for t in stats["topics"]]


# -- /stats (nsqd/stats.go GetStats) ------------------------------------------


def test_stats_of_an_unknown_topic_has_null_topics_and_producers(broker: Broker) -> None:
    with raw(broker) as p:
        p.pub("known", b"x")
        stats = get_json(broker, "/stats?format=json&topic=unknown")
    assert stats["topics"] is None
    assert stats["producers"] is None


def test_stats_channel_filter_leaves_out_topics_without_that_channel(broker: Broker) -> None:
    for topic, channel in (("a", "c"), ("b", "other")):
        assert request(broker, "POST", f"/topic/create?topic={topic}")[0] == 200
        assert request(broker, "POST", f"/channel/create?topic={topic}&channel={channel}")[0] == 200
    stats = get_json(broker, "/stats?format=json&channel=c")
    assert topic_names(stats) == ["a"]
    assert [c["channel_name"] for c in stats["topics"][0]["channels"]] == ["c"]


def test_stats_producers_are_not_filtered_by_topic(broker: Broker) -> None:
    request(broker, "POST", "/topic/create?topic=b")
    with raw(broker) as p:
        p.pub("a", b"x")
        stats = get_json(broker, "/stats?format=json&topic=b")
    assert topic_names(stats) == ["b"]
    [producer] = stats["producers"]
    assert "pub_counts" not in producer  # only its pub_counts are filtered (then omitted)


def test_stats_producers_is_null_without_producers(broker: Broker) -> None:
    request(broker, "POST", "/topic/create?topic=t")
    stats = get_json(broker, "/stats?format=json")
    assert topic_names(stats) == ["t"]
    assert stats["producers"] is None


def test_stats_without_clients_has_null_clients_and_producers(broker: Broker) -> None:
    with raw(broker) as c, raw(broker) as p:
        c.sub("t", "ch")
        p.pub("t", b"x")
        stats = get_json(broker, "/stats?format=json&include_clients=false")
        full = get_json(broker, "/stats?format=json&include_clients=true")
    [channel] = stats["topics"][0]["channels"]
    assert channel["clients"] is None
    assert channel["client_count"] == 1
    assert stats["producers"] is None
    assert len(full["topics"][0]["channels"][0]["clients"]) == 1
    assert len(full["producers"]) == 1


# -- client identity (nsqd/client_v2.go newClientV2, Identify) -----------------


def channel_clients(broker: Broker, topic: str = "t", channel: str = "ch") -> list[Any]:
    stats = get_json(broker, f"/stats?format=json&topic={topic}&channel={channel}")
    clients: list[Any] = stats["topics"][0]["channels"][0]["clients"]
    return clients


def test_client_id_and_hostname_are_the_remote_ip_until_identify(broker: Broker) -> None:
    with raw(broker) as c:
        c.sub("t", "ch")
        [client] = channel_clients(broker)
    assert (client["client_id"], client["hostname"]) == ("127.0.0.1", "127.0.0.1")


def test_identify_without_client_id_clears_it(broker: Broker) -> None:
    with raw(broker) as c:
        assert c.identify(user_agent="ua") == b"OK"
        c.sub("t", "ch")
        [client] = channel_clients(broker)
    assert (client["client_id"], client["hostname"], client["user_agent"]) == ("", "", "ua")


def test_identify_ignores_the_pre_1_0_short_id_and_long_id(broker: Broker) -> None:
    with raw(broker) as c:
        # unknown fields for nsqd v1.x: neither used nor type-checked
        assert c.identify(short_id=5, long_id="old-host") == b"OK"
        c.sub("t", "ch")
        [client] = channel_clients(broker)
    assert (client["client_id"], client["hostname"]) == ("", "")


# -- HTTP (nsqd/http.go) -----------------------------------------------------


def test_head_is_not_routed_to_get(broker: Broker) -> None:
    # nsqd's httprouter has no automatic HEAD: the method is not allowed
    status, _, _ = request(broker, "HEAD", "/stats")
    assert status == 405


def test_topic_pause_does_not_validate_the_name(broker: Broker) -> None:
    for action in ("pause", "unpause"):
        status, body, _ = request(broker, "POST", f"/topic/{action}?topic=bad!")
        assert (status, json.loads(body)) == (404, {"message": "TOPIC_NOT_FOUND"})


def test_pub_creates_the_topic_before_checking_defer(broker: Broker) -> None:
    status, body, _ = request(broker, "POST", "/pub?topic=t&defer=soon", b"x")
    assert (status, json.loads(body)) == (400, {"message": "INVALID_DEFER"})
    [topic] = get_json(broker, "/stats?format=json")["topics"]
    assert (topic["topic_name"], topic["message_count"]) == ("t", 0)


def test_mpub_creates_the_topic_before_reading_the_body(make_broker: Any) -> None:
    broker = make_broker(max_msg_size=10)
    status, body, _ = request(broker, "POST", "/mpub?topic=t", b"x" * 11)
    assert (status, json.loads(body)) == (413, {"message": "MSG_TOO_BIG"})
    [topic] = get_json(broker, "/stats?format=json")["topics"]
    assert (topic["topic_name"], topic["message_count"]) == ("t", 0)


def binary_body(*bodies: bytes) -> bytes:
    return struct.pack(">i", len(bodies)) + b"".join(struct.pack(">i", len(b)) + b for b in bodies)


def test_mpub_binary_param_values(broker: Broker) -> None:
    payload = binary_body(b"one", b"two")
    # nsqd's boolParams: "true"/"1" and "false"/"0"; any other value is binary
    for value in ("1", "true", "f", "False", "yes", ""):
        assert request(broker, "POST", f"/mpub?topic=bin&binary={value}", payload)[0] == 200
    for value in ("0", "false"):
        assert request(broker, "POST", f"/mpub?topic=txt&binary={value}", b"a\nb")[0] == 200
    stats = get_json(broker, "/stats?format=json")
    counts = {t["topic_name"]: t["message_count"] for t in stats["topics"]}
    assert counts == {"bin": 12, "txt": 4}


def test_mpub_binary_ignores_bytes_after_the_last_message(broker: Broker) -> None:
    payload = binary_body(b"one") + b"trailing garbage"
    assert request(broker, "POST", "/mpub?topic=t&binary=true", payload)[:2] == (200, b"OK")
    with raw(broker) as c:
        c.sub("t", "ch", rdy=5)
        assert c.message().body == b"one"
        c.assert_silent(0.2)


def test_identify_with_a_null_body_is_accepted(broker: Broker) -> None:
    with raw(broker) as c:
        # Go's json.Unmarshal of null into a struct leaves it zero: every default
        c.command(b"IDENTIFY", b"null")
        assert c.response() == b"OK"
        c.sub("t", "ch")


# -- lookupd (nsqd/nsqd.go GetTopic) ------------------------------------------


def test_a_new_topic_first_creates_the_channels_lookupd_knows(make_broker: Any) -> None:
    with Lookupd("127.0.0.1:0", "127.0.0.1:0", broadcast_address="127.0.0.1") as lookupd:
        for channel in ("c", "e#ephemeral"):
            params = {"topic": "t", "channel": channel}
            http_request(lookupd.http_address, "POST", "/channel/create", params)
        broker = make_broker(lookupd_tcp_addresses=[lookupd.tcp_address])
        wait_until(lambda: len(LookupdClient(lookupd.http_address).nodes()) == 1)
        with raw(broker) as p:
            p.pub("t", b"first")  # the topic is new here: nsqd asks lookupd for channels
            with raw(broker) as c:
                c.sub("t", "late")  # created after the first message: it misses it
                p.pub("t", b"second")
        [topic] = get_json(broker, "/stats?format=json")["topics"]
    depths = {ch["channel_name"]: ch["depth"] for ch in topic["channels"]}
    assert depths == {"c": 2, "late": 1}  # the ephemeral one is not pre-created


def test_lookupd_ping_is_plain_text_without_the_nsq_header() -> None:
    with Lookupd("127.0.0.1:0", "127.0.0.1:0") as lookupd:
        host, port = lookupd.http_address.rsplit(":", 1)
        conn = GeventHTTPConnection(host, int(port), timeout=5)
        try:
            conn.request("GET", "/ping")
            response = conn.getresponse()
            assert (response.status, response.read()) == (200, b"OK")
            assert response.getheader("X-NSQ-Content-Type") is None
        finally:
            conn.close()


# -- CLS (nsqd/protocol_v2.go CLS, FIN, PUB) ------------------------------------


def test_after_cls_in_flight_messages_can_still_be_finished_and_pub_works(
    broker: Broker,
) -> None:
    with raw(broker) as c, raw(broker) as p:
        c.sub("t", "ch", rdy=1)
        p.pub("t", b"one")
        msg = c.message()
        c.command(b"CLS")
        assert c.response() == b"CLOSE_WAIT"
        c.touch(msg.id)
        c.fin(msg.id)
        c.pub("other", b"published while closing")
        c.command(b"CLS")
        assert c.error() == b"E_INVALID cannot CLS in current state"
        c.assert_closed()
    stats = get_json(broker, "/stats?format=json")
    counts = {t["topic_name"]: t["message_count"] for t in stats["topics"]}
    assert counts == {"other": 1, "t": 1}
    [channel] = next(t for t in stats["topics"] if t["topic_name"] == "t")["channels"]
    assert channel["in_flight_count"] == 0
