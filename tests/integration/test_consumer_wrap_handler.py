"""Consumer.wrap_handler: every handler call runs through the wrappers, whatever the handler.

The hook gnsqlite.tracing uses; these tests hold it to what its docstring
promises, against a live nsqd (embedded or real).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent.event
import gevent.queue

from gnsqlite.consumer import Consumer
from gnsqlite.message import Message
from gnsqlite.producer import Producer
from gnsqlite.testing import NsqdServer

Wrapped = Callable[[Any], Any]


def recording(name: str, calls: list[str]) -> Callable[[Wrapped], Wrapped]:
    """A wrapper that notes ``name>`` before the call and ``<name`` after it (raised or not)."""

    def wrap(handler: Wrapped) -> Wrapped:
        def wrapped(arg: Any) -> Any:
            calls.append(f"{name}>{'batch' if isinstance(arg, list) else 'one'}")
            try:
                return handler(arg)
            finally:
                calls.append(f"<{name}")

        return wrapped

    return wrap


def test_wrappers_nest_in_order_and_a_later_set_handler_is_wrapped_too(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    calls: list[str] = []
    got: gevent.queue.Queue[bytes] = gevent.queue.Queue()

    def first(message: Message) -> None:
        calls.append("first")
        if message.attempts == 1:
            raise ValueError("fails once")  # through the wrappers: requeued, redelivered
        got.put(message.body)

    consumer = Consumer(
        "wrap_single",
        "ch",
        first,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        requeue_delay=0.0,
        backoff=None,
    )
    consumers.append(consumer)
    consumer.wrap_handler(recording("a", calls))
    consumer.wrap_handler(recording("b", calls))  # added later: outside a
    consumer.start()
    with Producer([nsqd.tcp_address]) as producer:
        producer.publish("wrap_single", b"one")
        assert got.get(timeout=10) == b"one"
        assert calls == ["b>one", "a>one", "first", "<a", "<b"] * 2

        calls.clear()
        consumer.set_handler(lambda message: got.put(b"second " + message.body))
        producer.publish("wrap_single", b"two")
        assert got.get(timeout=10) == b"second two"
        assert calls == ["b>one", "a>one", "<a", "<b"]


def test_a_batch_handler_is_wrapped_and_gets_the_list(
    nsqd: NsqdServer, consumers: list[Consumer]
) -> None:
    calls: list[str] = []
    batches: gevent.event.AsyncResult[list[bytes]] = gevent.event.AsyncResult()
    consumer = Consumer(
        "wrap_batch",
        "ch",
        batch_handler=lambda messages: batches.set([m.body for m in messages]),
        batch_size=2,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=2,
    )
    consumers.append(consumer)
    consumer.wrap_handler(recording("a", calls))
    consumer.start()
    with Producer([nsqd.tcp_address]) as producer:
        producer.multi_publish("wrap_batch", [b"x", b"y"])
        bodies = batches.get(timeout=10)
        assert bodies is not None and sorted(bodies) == [b"x", b"y"]
    assert calls == ["a>batch", "<a"]
