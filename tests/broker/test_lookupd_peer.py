"""The nsqd side of lookupd registration (gnsqlite.broker.lookup_peer)."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from typing import Any

import gevent
import gevent.queue
import gevent.server
import gevent.socket
import pytest

from gnsqlite.broker.lookup_peer import Listener, LookupPeers, attach, register_commands
from gnsqlite.broker.lookupd import Lookupd
from gnsqlite.http import LookupdClient
from gnsqlite.testing.waiting import wait_until

pytestmark = pytest.mark.embedded_only


class FakeBroker:
    """The surface of gnsqlite.broker.Broker that lookup_peer uses."""

    broadcast_address = "127.0.0.1"
    hostname = "broker-host"
    version = "1.3.0"
    tcp_port = 14150
    http_port = 14151

    def __init__(self, registrations: list[tuple[str, str | None]] | None = None) -> None:
        self.listeners: list[Listener] = []
        self.pairs = list(registrations or [])

    def add_listener(self, callback: Listener) -> None:
        self.listeners.append(callback)

    def remove_listener(self, callback: Listener) -> None:
        self.listeners.remove(callback)

    def registrations(self) -> list[tuple[str, str | None]]:
        return list(self.pairs)

    def emit(self, action: str, topic: str, channel: str | None = None) -> None:
        if action == "REGISTER":
            self.pairs.append((topic, channel))
        else:
            self.pairs = [p for p in self.pairs if p[0] != topic or (channel and p[1] != channel)]
        for listener in list(self.listeners):
            listener(action, topic, channel)


class ListenerOnlyBroker(FakeBroker):
    """A broker without registrations(): lookup_peer tracks the listener itself."""

    registrations = None  # type: ignore[assignment]


@pytest.fixture
def lookupd() -> Iterator[Lookupd]:
    with Lookupd("127.0.0.1:0", "127.0.0.1:0") as server:
        yield server


@pytest.fixture
def client(lookupd: Lookupd) -> LookupdClient:
    return LookupdClient(lookupd.http_address)


def producers(client: LookupdClient, topic: str) -> list[int]:
    return [p["tcp_port"] for p in client.lookup(topic)["producers"]]


def test_register_commands_follow_nsqd() -> None:
    assert register_commands([("a", None), ("b", "x"), ("b", "y"), ("c", None)]) == [
        b"REGISTER a\n",
        b"REGISTER b x\n",
        b"REGISTER b y\n",
        b"REGISTER c\n",
    ]


def test_existing_topics_and_channels_are_registered(
    lookupd: Lookupd, client: LookupdClient
) -> None:
    broker = FakeBroker([("t1", None), ("t2", "c")])
    peers = attach(broker, [lookupd.tcp_address])
    try:
        assert peers.wait_registered(5)
        assert producers(client, "t1") == [14150]
        assert client.lookup("t2") == {
            "channels": ["c"],
            "producers": [
                {
                    "remote_address": client.nodes()[0]["remote_address"],
                    "hostname": "broker-host",
                    "broadcast_address": "127.0.0.1",
                    "tcp_port": 14150,
                    "http_port": 14151,
                    "version": "1.3.0",
                }
            ],
        }
        assert peers.peers[0].info is not None
        assert peers.peers[0].info["http_port"] == lookupd.http_port
    finally:
        peers.close()


@pytest.mark.parametrize("broker_class", [FakeBroker, ListenerOnlyBroker])
def test_changes_follow_the_listener(
    lookupd: Lookupd, client: LookupdClient, broker_class: type[FakeBroker]
) -> None:
    broker = broker_class()
    peers = attach(broker, [lookupd.tcp_address])
    try:
        assert peers.wait_registered(5)
        broker.emit("REGISTER", "t")
        broker.emit("REGISTER", "t", "c")
        wait_until(lambda: client.channels("t") == ["c"])
        assert producers(client, "t") == [14150]
        broker.emit("UNREGISTER", "t", "c#ephemeral")
        broker.emit("UNREGISTER", "t")
        wait_until(lambda: producers(client, "t") == [])
    finally:
        peers.close()


@pytest.mark.parametrize("broker_class", [FakeBroker, ListenerOnlyBroker])
def test_reconnects_and_registers_again_after_lookupd_restarts(
    broker_class: type[FakeBroker],
) -> None:
    first = Lookupd("127.0.0.1:0", "127.0.0.1:0")
    first.start()
    broker = broker_class()
    peers = attach(broker, [first.tcp_address])
    try:
        assert peers.wait_registered(5)
        broker.emit("REGISTER", "t", "c")
        client = LookupdClient(first.http_address)
        wait_until(lambda: producers(client, "t") == [14150])
        first.stop()
        wait_until(lambda: not peers.peers[0].registered)
        broker.emit("REGISTER", "while-down")
        second = Lookupd(first.tcp_address, first.http_address)
        with second:
            assert peers.wait_registered(10)
            assert producers(client, "t") == [14150]
            assert client.channels("t") == ["c"]
            assert producers(client, "while-down") == [14150]
    finally:
        peers.close()


def test_pings_keep_the_producer_active() -> None:
    now = [0.0]
    server = Lookupd("127.0.0.1:0", "127.0.0.1:0", clock=lambda: now[0])
    with server:
        client = LookupdClient(server.http_address)
        peers = attach(FakeBroker([("t", None)]), [server.tcp_address], ping_interval=0.05)
        try:
            assert peers.wait_registered(5)
            now[0] += 1000  # inactive unless a PING arrives after this
            wait_until(lambda: producers(client, "t") == [14150])
        finally:
            peers.close()


def test_close_disconnects_kills_greenlets_and_removes_the_listener(
    lookupd: Lookupd, client: LookupdClient
) -> None:
    broker = FakeBroker([("t", None)])
    peers = attach(broker, [lookupd.tcp_address, lookupd.tcp_address])
    assert len(peers.peers) == 1  # duplicate addresses connect once
    assert peers.wait_registered(5)
    greenlet = peers.peers[0]._greenlet
    assert greenlet is not None
    peers.close()
    assert greenlet.dead
    assert broker.listeners == []
    wait_until(lambda: client.nodes() == [])
    peers.close()  # idempotent


def test_close_while_lookupd_is_unreachable_returns_promptly() -> None:
    with gevent.socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}"
    peers = attach(FakeBroker(), [dead])
    assert not peers.wait_registered(0.3)
    with gevent.Timeout(2):
        peers.close()
    assert all(p._greenlet is None for p in peers.peers)


class ScriptedLookupd:
    """A fake lookupd that records every command and answers OK (IDENTIFY: JSON)."""

    def __init__(self) -> None:
        self.commands: gevent.queue.Queue[Any] = gevent.queue.Queue()
        self.server = gevent.server.StreamServer(("127.0.0.1", 0), self._handle)

    def _handle(self, sock: gevent.socket.socket, _address: Any) -> None:
        rfile = sock.makefile("rb")
        self.commands.put(rfile.read(4))
        while True:
            line = rfile.readline()
            if not line:
                return
            if line == b"IDENTIFY\n":
                size = struct.unpack(">i", rfile.read(4))[0]
                self.commands.put(("IDENTIFY", json.loads(rfile.read(size))))
                answer = json.dumps(
                    {
                        "tcp_port": 1,
                        "http_port": 2,
                        "version": "x",
                        "broadcast_address": "b",
                        "hostname": "h",
                    }
                ).encode()
            else:
                self.commands.put(line)
                answer = b"OK"
            sock.sendall(struct.pack(">i", len(answer)) + answer)


def test_transcript_matches_nsqd() -> None:
    fake = ScriptedLookupd()
    fake.server.start()
    broker = FakeBroker([("t", "c"), ("u", None)])
    peers: LookupPeers = attach(broker, [f"127.0.0.1:{fake.server.server_port}"])
    try:
        got = [fake.commands.get(timeout=5) for _ in range(4)]
        assert got == [
            b"  V1",
            (
                "IDENTIFY",
                {
                    "version": "1.3.0",
                    "tcp_port": 14150,
                    "http_port": 14151,
                    "hostname": "broker-host",
                    "broadcast_address": "127.0.0.1",
                },
            ),
            b"REGISTER t c\n",
            b"REGISTER u\n",
        ]
        broker.emit("UNREGISTER", "t", "c")
        assert fake.commands.get(timeout=5) == b"UNREGISTER t c\n"
    finally:
        peers.close()
        fake.server.stop(timeout=1)


def test_an_error_answer_makes_it_reconnect(lookupd: Lookupd, client: LookupdClient) -> None:
    broker = FakeBroker()
    peers = attach(broker, [lookupd.tcp_address])
    try:
        assert peers.wait_registered(5)
        broker.emit("REGISTER", "bad!name")  # lookupd answers E_BAD_TOPIC and hangs up
        wait_until(lambda: not peers.peers[0].registered or client.nodes() == [])
        broker.pairs.clear()
        assert peers.wait_registered(5)
        wait_until(lambda: len(client.nodes()) == 1)
    finally:
        peers.close()


def test_embedded_broker_registers_and_unregisters(lookupd: Lookupd, client: LookupdClient) -> None:
    from gnsqlite.broker import Broker
    from gnsqlite.http import NsqdHTTPClient

    broker = Broker(
        tcp_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        broadcast_address="127.0.0.1",
        lookupd_tcp_addresses=[lookupd.tcp_address],
    )
    broker.start()
    assert broker.http_address is not None
    try:
        http = NsqdHTTPClient(broker.http_address)
        http.create_topic("orders")
        http.create_channel("orders", "billing")
        wait_until(lambda: client.channels("orders") == ["billing"])
        [producer] = client.lookup("orders")["producers"]
        assert (producer["tcp_port"], producer["http_port"]) == (broker.tcp_port, broker.http_port)
        assert producer["version"] == broker.version
        http.delete_topic("orders")
        wait_until(lambda: client.lookup("orders")["producers"] == [])
        http.create_topic("kept")
        wait_until(lambda: client.producer_addresses("kept") == [broker.tcp_address])
    finally:
        broker.stop()
    wait_until(lambda: client.nodes() == [])  # stop() closed the lookupd connection
