"""A Producer that finds its nsqd through nsqlookupd (the embedded one, or the real one).

The failover form of ``test_producer.py``'s mid-stream test, with lookupd
deciding the pool: publishers run without pause while nsqd join, are
stopped, or are no longer listed; every publish that returned is then found
on some nsqd, and each test prints its figures (published, consumed,
duplicates, errors) on one line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import gevent
import pytest
from test_conn import Subscriber
from test_consumer_edges import FakeLookupd

from gnsqlite.errors import ConfigError, InvalidNameError, NoConnectionsError
from gnsqlite.producer import Producer
from gnsqlite.testing import FaultProxy, LookupdServer, NsqdServer, wait_until
from gnsqlite.testing.plugin import NsqCluster
from gnsqlite.timers import TimerWheel

TOPIC = "found"
POLL = 0.2  # seconds between lookupd polls: the tests wait on what they change


class Load:
    """``count`` greenlets publishing numbered bodies through ``producer`` until stopped.

    ``acked`` holds each body whose publish returned (nsqd said OK);
    ``failed`` each error a publish raised.
    """

    def __init__(self, producer: Producer, count: int = 5) -> None:
        self.producer = producer
        self.acked: list[bytes] = []
        self.failed: list[BaseException] = []
        self._greenlets = [gevent.spawn(self._publish, producer, n) for n in range(count)]

    def _publish(self, producer: Producer, n: int) -> None:
        i = 0
        while True:
            body = b"%d-%06d" % (n, i)
            i += 1
            try:
                producer.publish(TOPIC, body)
            except NoConnectionsError as exc:
                self.failed.append(exc)
                continue
            self.acked.append(body)

    def more(self, count: int, timeout: float = 15.0) -> None:
        """Block until ``count`` more publishes returned."""
        target = len(self.acked) + count
        wait_until(lambda: len(self.acked) >= target, timeout=timeout)

    def stop(self) -> None:
        """Stop publishing; blocks until the publishes under way have ended."""
        gevent.killall(self._greenlets)
        stats = self.producer.stats
        if not self.producer.closed:
            wait_until(lambda: stats()["in_flight"] == 0, timeout=15)


def consume_all(servers: list[NsqdServer], expected: set[bytes]) -> list[bytes]:
    """Every body the ``servers`` hold on TOPIC, once ``expected`` are all there."""
    subs = [Subscriber(s.tcp_address, TOPIC, rdy=1000) for s in servers]
    try:
        wait_until(lambda: expected <= {b for s in subs for b in s.bodies}, timeout=20)
        total = sum(s.topic_stats(TOPIC)["message_count"] for s in servers)
        wait_until(lambda: sum(len(s.bodies) for s in subs) >= total, timeout=10)
        return [b for s in subs for b in s.bodies]
    finally:
        for sub in subs:
            sub.close()


def figures(name: str, load: Load, received: list[bytes], producer: Producer) -> str:
    discovery = producer.stats()["discovery"]
    return (
        f"{name}: published {len(load.acked)}, consumed {len(set(received))} distinct"
        f" ({len(received) - len(set(received))} duplicates), lost"
        f" {len(set(load.acked) - set(received))}, publish errors {len(load.failed)},"
        f" nsqd added {discovery['added']} removed {discovery['removed']}"
    )


@pytest.fixture
def cluster(nsqlookupd: LookupdServer) -> Iterator[Callable[..., NsqdServer]]:
    """``cluster()`` starts one more nsqd registered with the test's lookupd."""
    servers: list[NsqdServer] = []

    def add() -> NsqdServer:
        server = NsqdServer(lookupd=nsqlookupd)
        servers.append(server)
        server.start()
        registered = {f"127.0.0.1:{s.tcp_port}" for s in servers if s.running}
        wait_until(
            lambda: registered <= set(nsqlookupd.http.node_addresses()),
            timeout=10,
            message="the nsqd registered with lookupd",
        )
        return server

    try:
        yield add
    finally:
        for server in servers:
            server.close()


def producer_of(lookupd: LookupdServer | str, **options: Any) -> Producer:
    address = lookupd if isinstance(lookupd, str) else lookupd.http_address
    options.setdefault("lookupd_poll_interval", POLL)
    return Producer(lookupd_http_addresses=[address], reconnect_interval=0.1, **options)


def test_a_producer_given_only_lookupd_publishes_to_every_nsqd(nsq_cluster: NsqCluster) -> None:
    producer = producer_of(nsq_cluster.lookupd, lookupd_poll_interval=60.0)
    assert producer.addresses == ()  # the constructor asked nothing
    with producer:
        nsqds = sorted(s.tcp_address for s in nsq_cluster.nsqds)
        assert sorted(producer.addresses) == nsqds  # found before start() returned
        assert len(producer.connections) == 3
        for i in range(30):
            producer.publish(TOPIC, b"%d" % i)
        stats = producer.stats()
    counts = [s.topic_stats(TOPIC)["message_count"] for s in nsq_cluster.nsqds]
    assert counts == [10, 10, 10]  # spread in turn
    discovery = stats["discovery"]
    assert discovery["lookupd"] == [nsq_cluster.lookupd.http_address]
    assert (discovery["polls"], discovery["added"], discovery["removed"]) == (1, 3, 0)
    assert sorted(discovery["nsqd"]) == nsqds


def test_the_discovery_counts_are_in_stats_and_metrics(nsq_cluster: NsqCluster) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from gnsqlite.metrics import instrument

    registry = prometheus_client.CollectorRegistry()
    with producer_of(nsq_cluster.lookupd) as producer:
        instrument(producer, registry)
        wait_until(lambda: producer.stats()["discovery"]["polls"] >= 2, timeout=10)
        polls = producer.stats()["discovery"]["polls"]
        value = registry.get_sample_value
        assert value("gnsqlite_producer_lookupd_polls_total", {"outcome": "answered"}) >= polls
        assert value("gnsqlite_producer_lookupd_polls_total", {"outcome": "failed"}) == 0
        assert value("gnsqlite_producer_nsqd_changes_total", {"change": "added"}) == 3
        assert value("gnsqlite_producer_nsqd_changes_total", {"change": "removed"}) == 0
        assert value("gnsqlite_producer_nsqd_discovered") == 3


def test_lookupd_topic_publishes_where_the_topic_is_else_everywhere(
    nsq_cluster: NsqCluster,
) -> None:
    holder = nsq_cluster.nsqds[1]
    holder.http.create_topic(TOPIC)  # nsqd registers it with lookupd
    http = nsq_cluster.lookupd.http
    wait_until(lambda: http.producer_addresses(TOPIC) == [holder.tcp_address], timeout=10)
    with producer_of(nsq_cluster.lookupd, lookupd_topic=TOPIC) as producer:
        assert producer.addresses == (holder.tcp_address,)
        for i in range(6):
            producer.publish(TOPIC, b"%d" % i)
    assert holder.topic_stats(TOPIC)["message_count"] == 6
    with producer_of(nsq_cluster.lookupd, lookupd_topic="nowhere.yet") as producer:
        assert len(producer.addresses) == 3  # no nsqd has it: every nsqd (/nodes)


def test_an_nsqd_added_while_publishing_gets_traffic(
    nsqlookupd: LookupdServer, cluster: Callable[[], NsqdServer]
) -> None:
    first = cluster()
    producer = producer_of(nsqlookupd)
    producer.start()
    load = Load(producer)
    try:
        load.more(200)
        second = cluster()
        wait_until(lambda: second.tcp_address in producer.addresses, timeout=10)
        wait_until(lambda: len(producer.connections) == 2, timeout=10)
        load.more(400)
        load.stop()
        assert second.topic_stats(TOPIC)["message_count"] >= 100  # it took its turn
        received = consume_all([first, second], set(load.acked))
        print(figures("nsqd added", load, received, producer))
        assert producer.stats()["discovery"]["added"] == 2
    finally:
        load.stop()
        producer.close()
    assert set(load.acked) <= set(received)
    assert not load.failed
    assert producer.stats()["errors"] == {}


def test_an_nsqd_stopped_under_load_loses_nothing(
    nsqlookupd: LookupdServer, cluster: Callable[[], NsqdServer]
) -> None:
    servers = [cluster() for _ in range(3)]
    producer = producer_of(nsqlookupd, timeout=10.0)
    producer.start()
    load = Load(producer)
    try:
        load.more(300)
        victim = servers[0]
        victim.stop()  # mid-stream; persists what it holds, like nsqd on SIGTERM
        wait_until(lambda: victim.tcp_address not in producer.addresses, timeout=10)
        load.more(300)
        assert len(producer.connections) == 2
        load.stop()
    finally:
        load.stop()
        producer.close()
    victim.start()  # same ports and data: what it acknowledged is still there
    received = consume_all(servers, set(load.acked))
    print(figures("nsqd stopped", load, received, producer))
    assert set(load.acked) <= set(received)
    assert not load.failed
    assert producer.stats()["errors"] == {}
    assert producer.stats()["discovery"]["removed"] == 1


def test_an_nsqd_no_longer_listed_answers_what_it_took_then_closes(
    nsqd_factory: Callable[..., NsqdServer], fault_proxy: Callable[[str], FaultProxy]
) -> None:
    kept, dropped = nsqd_factory(), nsqd_factory()
    # A slow path to the one that leaves: publishes are always in flight on it.
    slow = fault_proxy(dropped.tcp_address)
    slow.delay(0.05)
    listed = [kept.tcp_address, slow.address]

    def nodes() -> tuple[str, bytes]:
        producers = [
            {"broadcast_address": "127.0.0.1", "tcp_port": int(a.rpartition(":")[2])}
            for a in listed
        ]
        return "200 OK", json.dumps({"producers": producers}).encode()

    lookupd = FakeLookupd(nodes).start()
    producer = producer_of(lookupd.address, timeout=10.0)
    producer.start()
    load = Load(producer, count=20)
    try:
        load.more(300)
        (gone,) = [c for c in producer.connections if c.name == slow.address]
        assert gone.pending  # publishes are waiting for its answers
        listed.remove(slow.address)
        wait_until(lambda: producer.addresses == (kept.tcp_address,), timeout=10)
        wait_until(lambda: gone.closed, timeout=10)
        assert gone.error is None  # closed by the producer, not broken
        taken = dropped.topic_stats(TOPIC)["message_count"]
        load.more(300)
        load.stop()
        assert dropped.topic_stats(TOPIC)["message_count"] == taken  # none sent there since
        assert producer.stats()["discovery"]["draining"] == 0
    finally:
        load.stop()
        producer.close()
        lookupd.stop()
    received = consume_all([kept, dropped], set(load.acked))
    print(figures("nsqd no longer listed", load, received, producer))
    # Every publish sent to it was answered there: none was cut and sent again
    # elsewhere (the bodies beyond the acknowledged ones are the publishes in
    # flight when the load stopped).
    assert set(load.acked) <= set(received)
    assert len(received) == len(set(received))
    assert not load.failed


def test_an_answer_listing_no_nsqd_keeps_the_pool(nsqd: NsqdServer) -> None:
    answers = [[nsqd.tcp_port], []]

    def nodes() -> tuple[str, bytes]:
        ports = answers[0] if len(answers) == 1 else answers.pop(0)
        producers = [{"broadcast_address": "127.0.0.1", "tcp_port": p} for p in ports]
        return "200 OK", json.dumps({"producers": producers}).encode()

    lookupd = FakeLookupd(nodes).start()
    try:
        with producer_of(lookupd.address) as producer:
            wait_until(lambda: producer.stats()["discovery"]["polls"] >= 3, timeout=10)
            assert producer.addresses == (nsqd.tcp_address,)  # a restarted lookupd lists none
            producer.publish(TOPIC, b"still here")
            assert producer.stats()["discovery"]["removed"] == 0
    finally:
        lookupd.stop()


def test_every_lookupd_down_gives_up_naming_them(nsqlookupd: LookupdServer) -> None:
    address = nsqlookupd.http_address
    nsqlookupd.stop()
    with producer_of(address, timeout=0.5) as producer:
        with pytest.raises(NoConnectionsError, match="every lookupd failed") as caught:
            producer.publish(TOPIC, b"x")
        assert list(caught.value.errors) == [address]
        assert producer.stats()["discovery"]["failed_polls"] >= 1
    empty = FakeLookupd(lambda: ("200 OK", b'{"producers": []}')).start()
    try:
        with (
            producer_of(empty.address, timeout=0.3) as producer,
            pytest.raises(NoConnectionsError, match="lists none yet"),
        ):
            producer.publish(TOPIC, b"x")
    finally:
        empty.stop()


def test_close_stops_the_polls_and_leaves_no_timer(nsq_cluster: NsqCluster) -> None:
    producer = producer_of(nsq_cluster.lookupd)
    producer.start()
    producer.publish(TOPIC, b"x")
    producer.close()
    assert producer.join(timeout=5)
    assert TimerWheel.for_hub().owned_by(producer) == []


def test_bad_lookupd_input_is_refused_before_anything_opens() -> None:
    with pytest.raises(ConfigError, match="are empty"):
        Producer(lookupd_http_addresses=[])
    with pytest.raises(ConfigError, match=r"lookupd_http_addresses: .*host:port"):
        Producer(lookupd_http_addresses=["nonsense"])
    with pytest.raises(ConfigError, match="lookupd_http_addresses"):
        Producer(lookupd_http_addresses=["http://127.0.0.1:4161"])
    with pytest.raises(ConfigError, match="lookupd_poll_interval=0 is out of range"):
        Producer(lookupd_http_addresses=["127.0.0.1:4161"], lookupd_poll_interval=0)
    with pytest.raises(ConfigError, match=r"lookupd_poll_jitter=-0\.1 is out of range"):
        Producer(lookupd_http_addresses=["127.0.0.1:4161"], lookupd_poll_jitter=-0.1)
    with pytest.raises(InvalidNameError, match="lookupd_topic"):
        Producer(lookupd_http_addresses=["127.0.0.1:4161"], lookupd_topic="bad/topic")
    with pytest.raises(ConfigError, match="lookupd_topic='t' needs lookupd_http_addresses"):
        Producer("127.0.0.1:4150", lookupd_topic="t")
    both = Producer("127.0.0.1:4150", lookupd_http_addresses="127.0.0.1:4161")
    assert both.addresses == ("127.0.0.1:4150",)  # static ones kept; lookupd adds to them
