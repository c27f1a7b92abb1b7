"""Producer and Consumer through a FaultProxy: resets, half-closes, stalls, restarts.

Each run ends with the books checked (:class:`~gnsqlite.testing.faults.DeliveryLedger`):
every acknowledged publish handled at least once, the channel empty, every
duplicate explained by a cause and bounded, no greenlet or timer left.
Faults are seeded: a failure prints ``seed=...``; ``GNSQLITE_FAULT_SEED``
replays it. Runs on the embedded broker and, with ``GNSQLITE_NSQD``, on nsqd.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import gevent
import pytest

from gnsqlite.consumer import Consumer
from gnsqlite.errors import NSQError
from gnsqlite.message import Message
from gnsqlite.producer import Producer
from gnsqlite.testing import FaultProxy, HubStalls, NsqdServer, wait_until
from gnsqlite.testing.faults import (
    AccountingHandler,
    DeliveryLedger,
    FaultInjector,
    describe_greenlets,
    live_greenlets,
    seed_from_env,
)
from gnsqlite.timers import TimerWheel

pytestmark = pytest.mark.slow  # 8-30 s each: the whole-suite env and the real-nsqd run take them

TOPIC = "faults"
CHANNEL = "ch"
MAX_IN_FLIGHT = 20
MSG_TIMEOUT = 1.0  # nsqd's, seconds: slow handlers outlive it quickly
#: The consumer's default: under many faults a message can be delivered more
#: often than this; it is then handed to the give-up hook, which the books count.
MAX_ATTEMPTS = 5
STALL = 0.5
#: A hub that did not run for this long (seconds) held its messages as a
#: stalled proxy does: half the margin a handling has before the ledger
#: counts it as timed out (MSG_TIMEOUT less the ledger's transit).
HUB_STALL = (MSG_TIMEOUT - (STALL + 0.1)) / 2


def run(
    nsqd: NsqdServer,
    fault_proxy: Callable[[str], FaultProxy],
    *,
    seed: int,
    count: int,
    faults: dict[str, float],
    fail_rate: float = 0.0,
    slow_rate: float = 0.0,
    restarts: int = 0,
) -> tuple[DeliveryLedger, FaultInjector, AccountingHandler, Consumer]:
    """Publish ``count`` numbers and consume them while faults happen; check the books."""
    rng = random.Random(seed)
    where = f"seed={seed} (GNSQLITE_FAULT_SEED={seed} replays it)"
    pub_proxy, sub_proxy = fault_proxy(nsqd.tcp_address), fault_proxy(nsqd.tcp_address)
    ledger = DeliveryLedger(transit=STALL + 0.1)
    handler = AccountingHandler(
        ledger, random.Random(rng.random()), fail_rate, slow_rate, overstay=0.2
    )
    injector = FaultInjector(
        [pub_proxy, sub_proxy],
        random.Random(rng.random()),
        weights=faults,
        stall_for=STALL,
        delay_for=0.2,
    )
    before = live_greenlets()
    hub_stalls = HubStalls(HUB_STALL)
    producer = Producer([pub_proxy.address], timeout=5.0, heartbeat_interval=1.0)
    consumer = Consumer(
        TOPIC,
        CHANNEL,
        handler,
        nsqd_tcp_addresses=[sub_proxy.address],
        max_in_flight=MAX_IN_FLIGHT,
        heartbeat_interval=1.0,
        backoff=None,
        requeue_delay=0.05,
        reconnect_interval=0.05,
        max_reconnect_interval=0.2,
        max_attempts=MAX_ATTEMPTS,
        on_giving_up=ledger.gave_up,
    )
    losses: list[int] = []

    def count_losses(conn: object, error: Exception | None) -> None:
        if error is not None:
            losses.append(1)

    consumer.on_connection_lost = count_losses  # type: ignore[method-assign]
    consumer.on_server_error = ledger.server_error  # type: ignore[method-assign]
    stop = False

    def publish() -> None:
        for number in range(count):
            try:
                producer.publish(TOPIC, str(number).encode())
                ledger.ack(number)
            except NSQError:
                ledger.publish_failed(number)
            gevent.sleep(0.002)

    def inject() -> None:
        done_restarts = 0
        while not stop:
            gevent.sleep(rng.uniform(0.05, 0.3))
            if done_restarts < restarts and rng.random() < 0.1:
                nsqd.restart()
                done_restarts += 1
            elif not stop:
                injector.inject()
        while done_restarts < restarts:
            nsqd.restart()
            done_restarts += 1

    try:
        hub_stalls.start()
        producer.start()
        consumer.start()
        faulting = gevent.spawn(inject)
        gevent.spawn(publish).join()
        stop = True
        faulting.join()
        for proxy in (pub_proxy, sub_proxy):
            proxy.resume()
        try:
            wait_until(
                lambda: not ledger.lost() and nsqd.channel_drained(TOPIC, CHANNEL),
                timeout=30,
                interval=0.1,
                ignore=(NSQError, OSError),
                message="every acknowledged publish handled, channel empty",
            )
        except AssertionError as exc:
            pytest.fail(f"{exc}: lost {ledger.explain_lost()}; {ledger.summary()}; {where}")
    finally:
        consumer.close(timeout=5.0)
        producer.close()
        hub_stalls.stop()
    try:
        # The proxies' pumps end after both their peers closed (nsqd's side too,
        # which a loaded machine can take seconds to do): wait generously.
        wait_until(lambda: live_greenlets() <= before, timeout=15, message="greenlets ended")
    except AssertionError:
        pytest.fail(f"greenlets left: {describe_greenlets(live_greenlets() - before)}; {where}")
    assert TimerWheel.for_hub().owned_by(consumer) == [], where
    assert TimerWheel.for_hub().owned_by(producer) == [], where
    assert ledger.acked_count + ledger.unacked == count, where
    # Only a message delivered more than max_attempts times is given up.
    assert all(attempts > MAX_ATTEMPTS for attempts in ledger.given_up.values()), where
    dups = ledger.duplicates()
    # Every duplicate has a cause, and each cause is bounded by what caused it.
    assert dups["unexplained"] == 0, f"{ledger.summary()}; {where}"
    # Held up by the network (stalls, delays) or by the machine (the hub unscheduled).
    held_up = injector.counts["stall"] + injector.counts["delay"] + hub_stalls.count
    stalled = f"hub stalls {hub_stalls.count} (longest {hub_stalls.longest:.2f} s)"
    assert dups["timed_out"] <= handler.slow + held_up * MAX_IN_FLIGHT, (
        f"{ledger.summary()}; slow {handler.slow}; {stalled};"
        f" faults {dict(injector.counts)}; {where}"
    )
    assert dups["connection_lost"] <= (len(losses) + restarts) * MAX_IN_FLIGHT, where
    print(
        f"{ledger.summary()} slow {handler.slow} losses {len(losses)}"
        f" faults {dict(injector.counts)}; {stalled}; {where}"
    )
    return ledger, injector, handler, consumer


def test_resets_and_half_closes_lose_nothing(
    nsqd_factory: Callable[..., NsqdServer], fault_proxy: Callable[[str], FaultProxy]
) -> None:
    nsqd = nsqd_factory(msg_timeout=MSG_TIMEOUT)
    ledger, injector, _, _ = run(
        nsqd,
        fault_proxy,
        seed=seed_from_env(),
        count=1500,
        faults={"cut": 3, "half_close_client": 1, "half_close_server": 1},
    )
    assert injector.counts["cut"] > 0
    assert ledger.lost() == []


def test_stalls_delays_failing_and_slow_handlers_lose_nothing(
    nsqd_factory: Callable[..., NsqdServer], fault_proxy: Callable[[str], FaultProxy]
) -> None:
    nsqd = nsqd_factory(msg_timeout=MSG_TIMEOUT)
    ledger, _, handler, _ = run(
        nsqd,
        fault_proxy,
        seed=seed_from_env(),
        count=1000,
        faults={"stall": 1, "delay": 1, "cut": 1},
        fail_rate=0.05,
        slow_rate=0.02,
    )
    assert ledger.failures > 0 and handler.slow > 0
    assert ledger.lost() == []


def test_broker_restarts_lose_nothing(
    nsqd_factory: Callable[..., NsqdServer], fault_proxy: Callable[[str], FaultProxy]
) -> None:
    nsqd = nsqd_factory(msg_timeout=MSG_TIMEOUT)
    ledger, _, _, _ = run(
        nsqd,
        fault_proxy,
        seed=seed_from_env(),
        count=800,
        faults={"cut": 1},
        fail_rate=0.02,
        restarts=2,
    )
    assert ledger.lost() == []


def test_answers_on_a_dead_connection_return_false_and_its_queue_empties(
    nsqd: NsqdServer, fault_proxy: Callable[[str], FaultProxy]
) -> None:
    """A cut drops the dead connection's unstarted messages; late answers say they did nothing."""
    proxy = fault_proxy(nsqd.tcp_address)
    with Producer([nsqd.tcp_address]) as producer:
        producer.multi_publish(TOPIC, [str(n).encode() for n in range(50)])
    held: list[Message] = []
    release = gevent.event.Event()

    def handle(message: Message) -> None:
        held.append(message)
        release.wait(10)

    consumer = Consumer(
        TOPIC,
        CHANNEL,
        handle,
        nsqd_tcp_addresses=[proxy.address],
        max_in_flight=20,
        concurrency=2,
        reconnect_interval=5.0,
    )
    try:
        consumer.start()
        wait_until(lambda: consumer.stats()["queued"] >= 10, timeout=10, message="queue filled")
        stats = consumer.stats()["totals"]
        assert stats["rdy"] == 20 and stats["rdy_remaining"] >= 0
        assert proxy.cut() == 1
        wait_until(lambda: not consumer.connections, timeout=5, message="connection lost")
        assert consumer.stats()["queued"] == 0  # left the queue at once: nsqd redelivers them
        assert len(held) == 2
        message = held[0]
        assert message.connection_lost
        assert message.touch() is False
        assert message.finish() is False
        assert held[1].requeue() is False
    finally:
        release.set()
        consumer.close(timeout=5.0)
