"""The Batcher alone: hand-over rules, answers and timers, with a recording responder."""

from __future__ import annotations

from typing import Any

import gevent
import gevent.event
import gevent.queue
import pytest

from gnsqlite.config import ConsumerConfig
from gnsqlite.consumer.batch import Batch, BatchConfig, Batcher
from gnsqlite.consumer.settle import Settler
from gnsqlite.message import Message, RequeueMessage
from gnsqlite.testing import wait_until
from gnsqlite.timers import TimerWheel

pytestmark = pytest.mark.no_server


class Answers:
    """A Responder that records every answer as (action, body, delay, backoff)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, bytes, float | None, bool]] = []

    def on_finish(self, message: Message) -> None:
        self.log.append(("fin", message.body, None, False))

    def on_requeue(self, message: Message, delay: float | None, backoff: bool) -> None:
        self.log.append(("req", message.body, delay, backoff))

    def on_touch(self, message: Message) -> None:
        self.log.append(("touch", message.body, None, False))


class Rig:
    """A Batcher on the hub's wheel, dispatching into a queue, starved when told."""

    def __init__(self, handler: Any = None, size: int = 5, timeout: float = 60.0, **kw: Any):
        self.answers = Answers()
        self.starved = False
        self.given_up: list[bytes] = []
        self.batches: gevent.queue.Queue[Batch] = gevent.queue.Queue()
        self.batcher = Batcher(
            handler if handler is not None else (lambda messages: None),
            BatchConfig(batch_size=size, batch_timeout=timeout),
            dispatch=self.batches.put,
            is_starved=lambda: self.starved,
            settle=Settler(
                ConsumerConfig(max_attempts=kw.get("max_attempts", 0)),
                on_giving_up=lambda m: self.given_up.append(m.body),
                dead_letters=None,
                count_given_up=lambda nsqd: None,
            ).settle_batch,
        )
        self.wheel = TimerWheel.for_hub()
        self.batcher.start(self.wheel)
        self.count = 0

    def message(self, attempts: int = 1, msg_timeout: float = 60.0) -> Message:
        self.count += 1
        return Message(
            b"%016d" % self.count,
            b"m%d" % self.count,
            0,
            attempts,
            "nsqd:1",
            self.answers,
            msg_timeout,
        )

    def bodies(self, batch: Batch) -> list[bytes]:
        return [m.body for m in batch.messages]


def test_a_full_batch_goes_at_once_and_a_partial_one_waits() -> None:
    rig = Rig(size=3)
    for _ in range(4):
        rig.batcher.add(rig.message())
    batch = rig.batches.get(timeout=1)
    assert (rig.bodies(batch), batch.reason) == ([b"m1", b"m2", b"m3"], "full")
    assert rig.batches.empty() and rig.batcher.stats()["pending"] == 1
    rig.batcher.stop()
    assert rig.answers.log == [("req", b"m4", 0.0, False)]  # close requeues the partial batch
    assert rig.wheel.owned_by(rig.batcher) == []


def test_the_starved_event_hands_the_pending_batch_over() -> None:
    rig = Rig(size=10)
    rig.batcher.add(rig.message())
    rig.batcher.add(rig.message())
    assert rig.batches.empty()
    rig.starved = True  # e.g. a backoff window's RDY 0
    rig.batcher.starved()
    batch = rig.batches.get(timeout=1)
    assert (rig.bodies(batch), batch.reason) == ([b"m1", b"m2"], "starved")
    rig.batcher.stop()


def test_a_message_that_starves_the_consumer_joins_the_batch_first() -> None:
    # The consumer sets its starved Event (calling starved()) before the
    # message that starved it is added: the batch must not split in two.
    rig = Rig(size=10)
    rig.batcher.add(rig.message())
    rig.starved = True
    rig.batcher.starved()
    rig.batcher.add(rig.message())
    batch = rig.batches.get(timeout=1)
    assert (rig.bodies(batch), batch.reason) == ([b"m1", b"m2"], "starved")
    with pytest.raises(gevent.queue.Empty):
        rig.batches.get(timeout=0.05)  # the deferred check finds nothing left
    rig.batcher.stop()


def test_while_a_batch_is_out_starvation_waits_for_its_answers() -> None:
    # A running batch's answers let more messages in: the next batch keeps
    # filling instead of going out a message at a time; when the running
    # batch is done and the consumer is still starved, it goes at once.
    rig = Rig(size=3)
    for _ in range(3):
        rig.batcher.add(rig.message())
    running = rig.batches.get(timeout=1)
    rig.starved = True
    rig.batcher.add(rig.message())
    rig.batcher.starved()
    rig.batcher.add(rig.message())
    with pytest.raises(gevent.queue.Empty):
        rig.batches.get(timeout=0.05)
    rig.batcher.run(running)
    batch = rig.batches.get(timeout=1)
    assert (rig.bodies(batch), batch.reason) == ([b"m4", b"m5"], "starved")
    assert rig.batcher.handed_over == {"full": 1, "timeout": 0, "starved": 1}
    rig.batcher.stop()


def test_the_timeout_counts_from_the_first_message() -> None:
    rig = Rig(size=10, timeout=0.2)
    rig.batcher.add(rig.message())
    batch = rig.batches.get(timeout=2)
    assert batch.reason == "timeout"
    assert rig.batcher.handed_over == {"full": 0, "timeout": 1, "starved": 0}
    rig.batcher.stop()


def test_answers_return_raise_requeue_and_give_up() -> None:
    calls: list[list[bytes]] = []

    def handle(messages: list[Message]) -> None:
        calls.append([m.body for m in messages])
        messages[0].requeue(5.0, backoff=False)  # answered by hand: skipped below
        if len(calls) == 2:
            raise RuntimeError("fails")
        if len(calls) == 3:
            raise RequeueMessage(delay=7.0)

    rig = Rig(handle, size=3, max_attempts=4)
    for _ in range(3):
        batch = Batch([rig.message(), rig.message(attempts=5), rig.message()], "full")
        rig.batcher.run(batch)
    assert calls == [[b"m1", b"m3"], [b"m4", b"m6"], [b"m7", b"m9"]]
    assert rig.given_up == [b"m2", b"m5", b"m8"]  # attempts 5 > max_attempts 4
    # Per batch: the give-up (before the handler), the handler's own answer, the rest.
    assert rig.answers.log == [
        ("fin", b"m2", None, False),
        ("req", b"m1", 5.0, False),
        ("fin", b"m3", None, False),
        ("fin", b"m5", None, False),
        ("req", b"m4", 5.0, False),
        ("req", b"m6", None, True),
        ("fin", b"m8", None, False),
        ("req", b"m7", 5.0, False),
        ("req", b"m9", 7.0, False),
    ]


def test_held_messages_are_touched_before_half_their_timeout_is_gone() -> None:
    release = gevent.event.Event()
    rig = Rig(lambda messages: release.wait(5), size=1)
    message = rig.message(msg_timeout=0.2)
    rig.batcher.add(message)
    batch = rig.batches.get(timeout=1)
    worker = gevent.spawn(rig.batcher.run, batch)
    # Touched every ~0.1 s while the handler runs: wait for three touches.
    wait_until(lambda: sum(1 for a in rig.answers.log if a[0] == "touch") >= 3, timeout=5)
    assert message.time_left() > 0.05  # it never ran out
    release.set()
    worker.get(timeout=5)
    assert rig.answers.log[-1] == ("fin", b"m1", None, False)
    assert rig.batcher.stats()["held"] == 0
    rig.batcher.stop()
