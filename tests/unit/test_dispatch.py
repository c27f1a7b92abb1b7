"""The dispatcher's workers: woken when idle, bounded by concurrency, ended by drain and kill."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import gevent
import gevent.event
import pytest

from gnsqlite.consumer.dispatch import Dispatcher
from gnsqlite.consumer.lifecycle import Lifecycle
from gnsqlite.testing.waiting import wait_until

pytestmark = pytest.mark.no_server


class Settler:
    """Calls the handler, as the real settler does for a message."""

    def settle(self, item: Any, handler: Any) -> None:
        handler(item)


def dispatcher(concurrency: int) -> Dispatcher:
    flow = SimpleNamespace(planner=SimpleNamespace(max_in_flight=concurrency))
    return Dispatcher(Settler(), flow, Lifecycle(owner="test"), concurrency)


def test_blocking_handlers_run_up_to_concurrency_and_every_item_is_handled() -> None:
    d = dispatcher(3)
    release = gevent.event.Event()
    running, most, handled = 0, 0, []

    def handler(item: Any) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        release.wait(5)
        running -= 1
        handled.append(item)

    d.handler = handler
    for i in range(10):
        d.enqueue(i)  # type: ignore[arg-type]
    gevent.sleep(0.05)
    assert (most, running) == (3, 3)
    release.set()
    with gevent.Timeout(5):
        while len(handled) < 10:
            gevent.sleep(0.01)
    assert sorted(handled) == list(range(10))
    assert d.queued == 0


def test_idle_workers_are_woken_for_later_items() -> None:
    d = dispatcher(2)
    handled: list[Any] = []
    done = gevent.event.Event()

    def handler(item: Any) -> None:
        handled.append(item)
        if len(handled) == 6:
            done.set()

    d.handler = handler
    for batch in ([0, 1], [2], [3, 4, 5]):  # the workers are idle between batches
        for item in batch:
            d.enqueue(item)  # type: ignore[arg-type]
        gevent.sleep(0.01)
    assert done.wait(5)
    assert handled == [0, 1, 2, 3, 4, 5]
    assert len(d._workers) <= 2


def test_drain_ends_idle_workers_and_kill_ends_the_rest() -> None:
    d = dispatcher(4)
    block = gevent.event.Event()

    def handler(item: Any) -> None:
        if item == "slow":
            block.wait(5)

    d.handler = handler
    for item in ("a", "b", "slow"):
        d.enqueue(item)  # type: ignore[arg-type]
    gevent.sleep(0.05)
    d.drain(0.2)  # the slow handler's worker is still running
    assert len(d._workers) == 1
    d.kill()
    gevent.sleep(0.01)  # the pool lets go of its dead greenlets
    assert len(d._workers) == 0
    assert not d._sleepers


def test_a_worker_killed_while_idle_is_no_longer_woken() -> None:
    d = dispatcher(2)
    handled: list[Any] = []
    d.handler = handled.append
    d.enqueue("a")  # type: ignore[arg-type]
    gevent.sleep(0.01)
    assert len(d._sleepers) == 1
    d.kill()
    assert not d._sleepers
    d.enqueue("b")  # type: ignore[arg-type]  # a new worker is spawned for it
    gevent.sleep(0.01)
    assert handled == ["a", "b"]


def test_running_maps_each_busy_worker_to_its_item_and_forgets_it_when_done() -> None:
    # The leases read it at each tick (the messages to extend), stats() counts it.
    d = dispatcher(2)
    started = {"a": gevent.event.Event(), "b": gevent.event.Event()}
    release = gevent.event.Event()
    workers: dict[str, Any] = {}

    def handler(item: Any) -> None:
        workers[item] = gevent.getcurrent()
        started[item].set()
        release.wait(5)

    d.handler = handler
    d.enqueue("a")  # type: ignore[arg-type]
    d.enqueue("b")  # type: ignore[arg-type]
    assert started["a"].wait(5) and started["b"].wait(5)
    assert dict(d.running) == {workers["a"]: "a", workers["b"]: "b"}  # type: ignore[comparison-overlap]
    assert len(d.running) == 2
    assert d.running.get(gevent.getcurrent()) is None  # not a worker
    release.set()
    wait_until(lambda: len(d.running) == 0, timeout=5)
    assert dict(d.running) == {} and list(d.running) == []
    assert all(not worker.dead for worker in workers.values())  # idle, not gone
    d.kill()
    d.stop()
    assert len(d.running) == 0
