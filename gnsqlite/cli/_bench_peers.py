"""The benchmark workloads run with pynsq (tornado) and gnsq, for ``gnsqlite bench --compare``.

Both are optional: :func:`available` says which are importable. They are
imported with :func:`importlib.import_module` only when a comparison runs.
Each function returns the elapsed seconds of the timed part.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import time
from collections.abc import Callable, Mapping
from typing import Any

import gevent
import gevent.event

from ..testing.waiting import wait_until
from ._bench_workloads import BATCH, CONCURRENCY, time_publishes

__all__ = ["PUBLISH", "CONSUME", "available"]


def available() -> list[str]:
    """The peers that are installed (``"pynsq"`` and/or ``"gnsq"``)."""
    found = []
    if importlib.util.find_spec("nsq") and importlib.util.find_spec("tornado"):
        found.append("pynsq")
    if importlib.util.find_spec("gnsq"):
        found.append("gnsq")
    return found


# -- gnsq -----------------------------------------------------------------------------


def _gnsq_producer(address: str, options: Mapping[str, Any] | None = None) -> Any:
    producer = importlib.import_module("gnsq").Producer([address], **dict(options or {}))
    producer.start()
    wait_until(lambda: producer._connections.qsize() > 0, timeout=10)
    return producer


def _gnsq_publish(
    address: str,
    topic: str,
    body: bytes,
    count: int,
    mode: str,
    options: Mapping[str, Any] | None = None,
) -> float:
    producer = _gnsq_producer(address, options)
    try:
        return time_publishes(producer.publish, producer.multipublish, topic, body, count, mode)
    finally:
        producer.close()


def gnsq_consume(
    address: str,
    topic: str,
    count: int,
    max_in_flight: int,
    options: Mapping[str, Any] | None = None,
) -> float:
    """Time gnsq's Consumer handling ``count`` queued messages."""
    done = gevent.event.Event()
    handled = 0
    consumer = importlib.import_module("gnsq").Consumer(
        topic,
        "bench",
        nsqd_tcp_addresses=[address],
        max_in_flight=max_in_flight,
        **dict(options or {}),
    )

    def handle(_consumer: object, message: object) -> None:
        nonlocal handled
        handled += 1
        if handled == count:
            done.set()

    consumer.on_message.connect(handle, weak=False)
    start = time.perf_counter()
    consumer.start(block=False)
    if not done.wait(600):
        raise RuntimeError(f"gnsq handled only {handled} of {count}")
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


# -- pynsq (tornado) -------------------------------------------------------------------


def _run_pynsq(
    address: str,
    drive: Callable[[Any, Callable[[], None]], None],
    options: Mapping[str, Any] | None = None,
) -> float:
    """Run ``drive(writer, done)`` on a fresh tornado loop; returns its elapsed seconds.

    The tornado loop blocks this thread while it runs; the broker must be
    in another process (``gnsqlite bench`` starts it in one).
    """
    nsq = importlib.import_module("nsq")
    io_loop_class = importlib.import_module("tornado.ioloop").IOLoop
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    io_loop = io_loop_class.current()
    finished = asyncio.Event()
    elapsed: list[float] = []
    writer = nsq.Writer([address], **dict(options or {}))

    async def main() -> None:
        while not any(c.connected() for c in writer.conns.values()):
            await asyncio.sleep(0.01)
        ready = asyncio.Event()
        writer.pub("warmup", b"x", callback=lambda conn, data: ready.set())
        await ready.wait()
        start = time.perf_counter()

        def done() -> None:
            elapsed.append(time.perf_counter() - start)
            finished.set()

        drive(writer, done)
        await asyncio.wait_for(finished.wait(), timeout=600)

    try:
        io_loop.run_sync(main)
    finally:
        for conn in list(writer.conns.values()):
            conn.close()
        io_loop.close(all_fds=True)
        asyncio.set_event_loop(None)
    return elapsed[0]


def _pynsq_publish(
    address: str,
    topic: str,
    body: bytes,
    count: int,
    mode: str,
    options: Mapping[str, Any] | None = None,
) -> float:
    batch = [body] * BATCH

    def check(data: Any) -> None:
        if isinstance(data, Exception):
            raise RuntimeError(f"pynsq publish failed: {data}")

    def drive(writer: Any, done: Callable[[], None]) -> None:
        state = {"sent": 0, "answered": 0}
        total = count // BATCH if mode == "mpub" else count
        window = CONCURRENCY if mode == "pipelined" else 1

        def send() -> None:
            state["sent"] += 1
            if mode == "mpub":
                writer.mpub(topic, batch, callback=answered)
            else:
                writer.pub(topic, body, callback=answered)

        def answered(conn: Any, data: Any) -> None:
            check(data)
            state["answered"] += 1
            if state["sent"] < total:
                send()
            elif state["answered"] == total:
                done()

        for _ in range(min(window, total)):
            send()

    return _run_pynsq(address, drive, options)


def pynsq_consume(
    address: str,
    topic: str,
    count: int,
    max_in_flight: int,
    options: Mapping[str, Any] | None = None,
) -> float:
    """Time pynsq's Reader handling ``count`` queued messages."""
    nsq = importlib.import_module("nsq")
    loop = importlib.import_module("tornado.ioloop").IOLoop.current()
    handled = 0

    def handle(message: object) -> bool:
        nonlocal handled
        handled += 1
        if handled == count:
            loop.add_callback(loop.stop)
        return True

    start = time.perf_counter()
    reader = nsq.Reader(
        topic=topic,
        channel="bench",
        message_handler=handle,
        nsqd_tcp_addresses=[address],
        max_in_flight=max_in_flight,
        **dict(options or {}),
    )
    loop.call_later(600, loop.stop)
    loop.start()
    elapsed = time.perf_counter() - start
    reader.close()
    if handled < count:
        raise RuntimeError(f"pynsq handled only {handled} of {count}")
    return elapsed


#: peer -> ``publish(address, topic, body, count, mode, options=None)``;
#: mode: sequential, pipelined, mpub; options: the peer's connection keywords
PUBLISH: dict[str, Callable[..., float]] = {
    "pynsq": _pynsq_publish,
    "gnsq": _gnsq_publish,
}
#: peer -> ``consume(address, topic, count, max_in_flight, options=None)``
CONSUME: dict[str, Callable[..., float]] = {
    "pynsq": pynsq_consume,
    "gnsq": gnsq_consume,
}
