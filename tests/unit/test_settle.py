"""The Settler's one rule from a single message's handler result to its answer."""

from __future__ import annotations

import logging
from typing import Any

import gevent
import pytest

from gnsqlite.config import ConsumerConfig
from gnsqlite.consumer.settle import Settler
from gnsqlite.message import Message, RequeueMessage

pytestmark = pytest.mark.no_server


class Conn:
    closed = False


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def on_finish(self, message: Message) -> None:
        self.calls.append(("finish",))

    def on_requeue(self, message: Message, delay: float | None, backoff: bool) -> None:
        self.calls.append(("requeue", delay, backoff))

    def on_touch(self, message: Message) -> None:
        self.calls.append(("touch",))


def settle(handler: Any, timing: bool = False) -> tuple[list[tuple[Any, ...]], list[float]]:
    responder = Recorder()
    message = Message(b"0" * 16, b"body", 0, 1, "nsqd:4150", responder, 60.0, Conn())
    settler = Settler(ConsumerConfig(), None, None, lambda nsqd: None)
    timings: list[float] = []
    if timing:
        settler.timing = timings.append
    settler.settle(message, handler)
    return responder.calls, timings


@pytest.mark.parametrize("timing", [False, True])
def test_a_handler_that_returns_finishes_its_message(timing: bool) -> None:
    calls, timings = settle(lambda message: None, timing)
    assert calls == [("finish",)]
    assert len(timings) == (1 if timing else 0)


def test_an_async_message_is_left_to_its_handler() -> None:
    assert settle(lambda message: message.enable_async())[0] == []


def test_requeue_message_requeues_as_asked() -> None:
    def handler(message: Message) -> None:
        raise RequeueMessage(delay=2.5, backoff=True)

    assert settle(handler)[0] == [("requeue", 2.5, True)]


@pytest.mark.parametrize("error", [ValueError("boom"), gevent.Timeout(1)])
def test_a_failure_is_logged_and_requeued_with_backoff(
    error: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    def handler(message: Message) -> None:
        raise error

    with caplog.at_level(logging.ERROR, logger="gnsqlite.consumer.settle"):
        calls, _ = settle(handler)
    assert calls == [("requeue", None, True)]
    assert any(r.exc_info and r.exc_info[1] is error for r in caplog.records)


@pytest.mark.parametrize("error", [gevent.GreenletExit, KeyboardInterrupt])
def test_what_must_unwind_requeues_at_once_and_is_raised_again(error: type) -> None:
    responder = Recorder()
    message = Message(b"0" * 16, b"body", 0, 1, "nsqd:4150", responder, 60.0, Conn())
    settler = Settler(ConsumerConfig(), None, None, lambda nsqd: None)

    def handler(message: Message) -> None:
        raise error()

    with pytest.raises(error):
        settler.settle(message, handler)
    assert responder.calls == [("requeue", 0.0, False)]
