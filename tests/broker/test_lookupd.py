"""The embedded nsqlookupd: its TCP registration protocol and its HTTP API."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import gevent.socket
import pytest

from gnsqlite.broker.lookupd import Lookupd
from gnsqlite.http import LookupdClient
from gnsqlite.http_transport import HTTPError, http_request
from gnsqlite.testing.waiting import wait_until

pytestmark = pytest.mark.embedded_only

IDENTITY = {
    "broadcast_address": "127.0.0.1",
    "tcp_port": 4150,
    "http_port": 4151,
    "version": "1.3.0",
    "hostname": "nsqd-host",
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def lookupd(clock: Clock) -> Iterator[Lookupd]:
    server = Lookupd("127.0.0.1:0", "127.0.0.1:0", broadcast_address="lookupd.test", clock=clock)
    with server:
        yield server


@pytest.fixture
def client(lookupd: Lookupd) -> LookupdClient:
    return LookupdClient(lookupd.http_address)


class Peer:
    """A raw TCP connection speaking nsqlookupd's protocol, as nsqd would."""

    def __init__(self, lookupd: Lookupd, magic: bytes = b"  V1") -> None:
        self.sock = gevent.socket.create_connection(("127.0.0.1", lookupd.tcp_port), timeout=5)
        self.sock.sendall(magic)

    def read_response(self) -> bytes:
        size = struct.unpack(">i", self._exactly(4))[0]
        return self._exactly(size)

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def command(self, line: str, body: bytes | None = None) -> bytes:
        raw = line.encode() + b"\n"
        if body is not None:
            raw += struct.pack(">i", len(body)) + body
        self.sock.sendall(raw)
        return self.read_response()

    def identify(self, **overrides: Any) -> dict[str, Any]:
        body = json.dumps({**IDENTITY, **overrides}).encode()
        result: dict[str, Any] = json.loads(self.command("IDENTIFY", body))
        return result

    def is_closed(self) -> bool:
        self.sock.settimeout(5)
        return self.sock.recv(1) == b""

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def peer(lookupd: Lookupd) -> Iterator[Peer]:
    p = Peer(lookupd)
    yield p
    p.close()


def status_of(address: str, method: str, path: str, **params: str) -> tuple[int, Any]:
    try:
        body = http_request(address, method, path, params)
    except HTTPError as exc:
        return exc.status, json.loads(exc.body)
    return 200, body


# -- TCP ----------------------------------------------------------------------


def test_identify_answers_with_lookupd_info(lookupd: Lookupd, peer: Peer) -> None:
    info = peer.identify()
    assert info == {
        "tcp_port": lookupd.tcp_port,
        "http_port": lookupd.http_port,
        "version": lookupd.version,
        "broadcast_address": "lookupd.test",
        "hostname": socket.gethostname(),
    }


def test_register_makes_the_producer_discoverable(client: LookupdClient, peer: Peer) -> None:
    peer.identify()
    assert peer.command("REGISTER clicks archive") == b"OK"
    assert peer.command("REGISTER clicks") == b"OK"
    result = client.lookup("clicks")
    assert result["channels"] == ["archive"]
    [producer] = result["producers"]
    local = peer.sock.getsockname()
    assert producer == {
        "remote_address": f"{local[0]}:{local[1]}",
        "hostname": "nsqd-host",
        "broadcast_address": "127.0.0.1",
        "tcp_port": 4150,
        "http_port": 4151,
        "version": "1.3.0",
    }
    assert client.topics() == ["clicks"]
    assert client.channels("clicks") == ["archive"]
    assert client.producer_addresses("clicks") == ["127.0.0.1:4150"]


def test_nodes_lists_identified_producers_with_their_topics(
    client: LookupdClient, peer: Peer
) -> None:
    peer.identify()
    assert client.nodes()[0]["topics"] == []
    peer.command("REGISTER a")
    peer.command("REGISTER b ch")
    [node] = client.nodes()
    assert node["topics"] == ["a", "b"]
    assert node["tombstones"] == [False, False]
    assert node["broadcast_address"] == "127.0.0.1"


def test_closing_the_connection_drops_its_registrations(
    client: LookupdClient, lookupd: Lookupd
) -> None:
    first, second = Peer(lookupd), Peer(lookupd)
    first.identify(tcp_port=1)
    second.identify(tcp_port=2)
    for p in (first, second):
        p.command("REGISTER clicks ch")
    assert sorted(p["tcp_port"] for p in client.lookup("clicks")["producers"]) == [1, 2]
    first.close()
    wait_until(lambda: len(client.nodes()) == 1)
    assert [p["tcp_port"] for p in client.lookup("clicks")["producers"]] == [2]
    second.close()
    wait_until(lambda: client.nodes() == [])
    # like nsqlookupd, the topic and channel stay known without producers
    assert client.lookup("clicks") == {"channels": ["ch"], "producers": []}
    assert client.topics() == ["clicks"]


def test_unregister_channel_and_topic(client: LookupdClient, peer: Peer) -> None:
    peer.identify()
    peer.command("REGISTER t c1")
    peer.command("REGISTER t c2")
    assert peer.command("UNREGISTER t c1") == b"OK"
    assert client.channels("t") == ["c1", "c2"]  # the channel key stays, as in nsqlookupd
    assert len(client.lookup("t")["producers"]) == 1
    assert peer.command("UNREGISTER t") == b"OK"
    assert client.lookup("t")["producers"] == []
    assert client.nodes()[0]["topics"] == []


def test_ephemeral_channels_and_topics_vanish_with_their_last_producer(
    client: LookupdClient, peer: Peer
) -> None:
    peer.identify()
    peer.command("REGISTER t c#ephemeral")
    peer.command("REGISTER t2#ephemeral")
    assert client.channels("t") == ["c#ephemeral"]
    peer.command("UNREGISTER t c#ephemeral")
    peer.command("UNREGISTER t2#ephemeral")
    assert client.channels("t") == []
    assert client.topics() == ["t"]


def test_ping_is_answered_before_and_after_identify(peer: Peer) -> None:
    assert peer.command("PING") == b"OK"
    peer.identify()
    assert peer.command("PING") == b"OK"


@pytest.mark.parametrize(
    ("identify_first", "line", "error"),
    [
        (False, "REGISTER t", b"E_INVALID client must IDENTIFY"),
        (False, "UNREGISTER t", b"E_INVALID client must IDENTIFY"),
        (False, "FOO bar", b"E_INVALID invalid command FOO"),
        (True, "REGISTER", b"E_INVALID REGISTER insufficient number of params"),
        (True, "REGISTER bad!topic", b"E_BAD_TOPIC REGISTER topic name 'bad!topic' is not valid"),
        (True, "REGISTER t bad!ch", b"E_BAD_CHANNEL REGISTER channel name 'bad!ch' is not valid"),
    ],
)
def test_protocol_errors_are_sent_then_the_connection_closes(
    peer: Peer, identify_first: bool, line: str, error: bytes
) -> None:
    if identify_first:
        peer.identify()
    assert peer.command(line) == error
    assert peer.is_closed()


def test_identify_requires_every_field(peer: Peer) -> None:
    body = json.dumps({"broadcast_address": "x", "tcp_port": 1, "version": "1"}).encode()
    assert peer.command("IDENTIFY", body) == b"E_BAD_BODY IDENTIFY missing fields"
    assert peer.is_closed()


def test_identify_rejects_bad_json(peer: Peer) -> None:
    assert peer.command("IDENTIFY", b"{nope") == b"E_BAD_BODY IDENTIFY failed to decode JSON body"
    assert peer.is_closed()


def test_identify_twice_is_refused(peer: Peer) -> None:
    peer.identify()
    body = json.dumps(IDENTITY).encode()
    assert peer.command("IDENTIFY", body) == b"E_INVALID cannot IDENTIFY again"


def test_bad_magic_is_refused(lookupd: Lookupd) -> None:
    p = Peer(lookupd, magic=b"  V2")
    try:
        assert p.read_response() == b"E_BAD_PROTOCOL"
        assert p.is_closed()
    finally:
        p.close()


def test_inactive_producers_are_hidden_until_they_ping(
    client: LookupdClient, peer: Peer, clock: Clock
) -> None:
    peer.identify()
    peer.command("REGISTER t")
    clock.now += 301  # past the default 300 s --inactive-producer-timeout
    assert client.lookup("t")["producers"] == []
    assert client.nodes() == []
    peer.command("PING")
    assert len(client.lookup("t")["producers"]) == 1


def test_stop_closes_connections_and_frees_the_ports() -> None:
    server = Lookupd("127.0.0.1:0", "127.0.0.1:0")
    server.start()
    p = Peer(server)
    assert p.command("PING") == b"OK"
    tcp, http = server.tcp_address, server.http_address
    server.stop()
    assert p.is_closed()
    p.close()
    again = Lookupd(tcp, http)
    with again:
        assert LookupdClient(again.http_address).ping()


# -- HTTP ---------------------------------------------------------------------


def test_ping_and_info(lookupd: Lookupd) -> None:
    assert http_request(lookupd.http_address, "GET", "/ping") == b"OK"
    assert json.loads(http_request(lookupd.http_address, "GET", "/info")) == {
        "version": lookupd.version
    }


def test_http_errors_have_nsqlookupd_codes(lookupd: Lookupd) -> None:
    address = lookupd.http_address
    assert status_of(address, "GET", "/lookup", topic="nope") == (
        404,
        {"message": "TOPIC_NOT_FOUND"},
    )
    assert status_of(address, "GET", "/lookup") == (400, {"message": "MISSING_ARG_TOPIC"})
    assert status_of(address, "GET", "/channels") == (400, {"message": "MISSING_ARG_TOPIC"})
    assert status_of(address, "POST", "/topic/create", topic="b@d") == (
        400,
        {"message": "INVALID_ARG_TOPIC"},
    )
    assert status_of(address, "POST", "/channel/create", topic="t") == (
        400,
        {"message": "MISSING_ARG_CHANNEL"},
    )
    assert status_of(address, "POST", "/channel/delete", topic="t", channel="c") == (
        404,
        {"message": "CHANNEL_NOT_FOUND"},
    )
    assert status_of(address, "POST", "/topic/tombstone", topic="t") == (
        400,
        {"message": "MISSING_ARG_NODE"},
    )
    assert status_of(address, "GET", "/topic/create", topic="t") == (
        405,
        {"message": "METHOD_NOT_ALLOWED"},
    )
    assert status_of(address, "GET", "/nope") == (404, {"message": "NOT_FOUND"})


def test_lookup_of_unknown_topic_is_empty_for_the_client(client: LookupdClient) -> None:
    assert client.lookup("nope") == {"channels": [], "producers": []}


def test_topic_and_channel_administration(client: LookupdClient, lookupd: Lookupd) -> None:
    address = lookupd.http_address
    assert status_of(address, "POST", "/topic/create", topic="t1") == (200, b"")
    assert status_of(address, "POST", "/channel/create", topic="t2", channel="c") == (200, b"")
    assert client.topics() == ["t1", "t2"]
    assert client.lookup("t1") == {"channels": [], "producers": []}
    assert client.channels("t2") == ["c"]
    assert status_of(address, "POST", "/channel/delete", topic="t2", channel="c") == (200, b"")
    assert client.channels("t2") == []
    http_request(address, "POST", "/channel/create", {"topic": "t2", "channel": "c"})
    assert status_of(address, "POST", "/topic/delete", topic="t2") == (200, b"")
    assert client.topics() == ["t1"]
    assert client.channels("t2") == []


def test_tombstone_hides_one_producer_of_one_topic(
    client: LookupdClient, lookupd: Lookupd, clock: Clock
) -> None:
    first, second = Peer(lookupd), Peer(lookupd)
    try:
        first.identify(http_port=1001)
        second.identify(http_port=1002)
        for p in (first, second):
            p.command("REGISTER t")
            p.command("REGISTER other")
        http_request(
            lookupd.http_address,
            "POST",
            "/topic/tombstone",
            {"topic": "t", "node": "127.0.0.1:1001"},
        )
        assert [p["http_port"] for p in client.lookup("t")["producers"]] == [1002]
        assert len(client.lookup("other")["producers"]) == 2
        nodes = {n["http_port"]: n for n in client.nodes()}
        assert nodes[1001]["topics"] == ["other", "t"]
        assert nodes[1001]["tombstones"] == [False, True]
        assert nodes[1002]["tombstones"] == [False, False]
        clock.now += 46  # past the default 45 s --tombstone-lifetime
        first.command("PING")
        second.command("PING")
        assert len(client.lookup("t")["producers"]) == 2
    finally:
        first.close()
        second.close()


# -- command line ---------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_command_line_serves_until_sigterm() -> None:
    tcp, http = _free_port(), _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gnsqlite.broker.lookupd",
            f"--tcp-address=127.0.0.1:{tcp}",
            "-http-address",
            f"127.0.0.1:{http}",
            "--broadcast-address=lookupd.cli",
            "--tombstone-lifetime=10s",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    try:
        client = LookupdClient(f"127.0.0.1:{http}", timeout=1.0)
        wait_until(client.ping, timeout=15, ignore=(OSError,))
        with socket.create_connection(("127.0.0.1", tcp), timeout=5) as sock:
            body = json.dumps(IDENTITY).encode()
            sock.sendall(b"  V1IDENTIFY\n" + struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", sock.recv(4))[0]
            assert json.loads(sock.recv(size))["broadcast_address"] == "lookupd.cli"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()
