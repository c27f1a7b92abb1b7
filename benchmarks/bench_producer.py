"""Producer throughput: gnsqlite against pynsq's Writer and gnsq's Producer.

Prints messages per second for three workloads, each run by the three
clients one after the other against the same nsqd in the same run, and the
ratio of gnsqlite to each:

* sequential PUB: one publisher waits for each answer before the next;
* pipelined PUB: 50 publishers at once (50 greenlets for gnsqlite and gnsq,
  50 outstanding callbacks for pynsq's tornado Writer);
* MPUB: batches of 100 messages, one batch at a time.

By default it starts the embedded broker in a subprocess
(``gnsqlite.testing.NsqdServer``; the real nsqd when ``GNSQLITE_NSQD`` names
its directory); ``--nsqd host:port`` uses a running nsqd instead. This is a
script that prints figures, not a test::

    python benchmarks/bench_producer.py [--count 20000] [--size 100]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import gevent
import gevent.event

from gnsqlite.http import NsqdHTTPClient
from gnsqlite.producer import Producer
from gnsqlite.testing import NsqdServer, wait_until

__all__ = ["main"]

CONCURRENCY = 50
BATCH = 100


# -- gnsqlite --------------------------------------------------------------------


def ours_sequential(address: str, topic: str, body: bytes, count: int) -> float:
    with Producer(address) as producer:
        producer.publish(topic, body)  # warm up: connection and topic exist
        start = time.perf_counter()
        for _ in range(count):
            producer.publish(topic, body)
        return time.perf_counter() - start


def ours_pipelined(address: str, topic: str, body: bytes, count: int) -> float:
    with Producer(address) as producer:
        producer.publish(topic, body)
        each = count // CONCURRENCY

        def publisher() -> None:
            for _ in range(each):
                producer.publish(topic, body)

        start = time.perf_counter()
        gevent.joinall([gevent.spawn(publisher) for _ in range(CONCURRENCY)], raise_error=True)
        return time.perf_counter() - start


def ours_mpub(address: str, topic: str, body: bytes, count: int) -> float:
    batch = [body] * BATCH
    with Producer(address) as producer:
        producer.publish(topic, body)
        start = time.perf_counter()
        for _ in range(count // BATCH):
            producer.multi_publish(topic, batch)
        return time.perf_counter() - start


# -- gnsq ----------------------------------------------------------------------------


def _gnsq_producer(address: str) -> Any:
    import gnsq

    producer = gnsq.Producer([address])
    producer.start()
    wait_until(lambda: producer._connections.qsize() > 0, timeout=10)
    return producer


def gnsq_sequential(address: str, topic: str, body: bytes, count: int) -> float:
    producer = _gnsq_producer(address)
    try:
        producer.publish(topic, body)
        start = time.perf_counter()
        for _ in range(count):
            producer.publish(topic, body)
        return time.perf_counter() - start
    finally:
        producer.close()
        producer.join(5)


def gnsq_pipelined(address: str, topic: str, body: bytes, count: int) -> float:
    producer = _gnsq_producer(address)
    try:
        producer.publish(topic, body)
        each = count // CONCURRENCY

        def publisher() -> None:
            for _ in range(each):
                producer.publish(topic, body)

        start = time.perf_counter()
        gevent.joinall([gevent.spawn(publisher) for _ in range(CONCURRENCY)], raise_error=True)
        return time.perf_counter() - start
    finally:
        producer.close()
        producer.join(5)


def gnsq_mpub(address: str, topic: str, body: bytes, count: int) -> float:
    producer = _gnsq_producer(address)
    batch = [body] * BATCH
    try:
        producer.publish(topic, body)
        start = time.perf_counter()
        for _ in range(count // BATCH):
            producer.multipublish(topic, batch)
        return time.perf_counter() - start
    finally:
        producer.close()
        producer.join(5)


# -- pynsq (tornado) --------------------------------------------------------------------


def _run_pynsq(address: str, drive: Callable[[Any, Callable[[], None]], None]) -> float:
    """Run ``drive(writer, done)`` on a fresh tornado loop; returns its elapsed seconds.

    The tornado loop blocks this thread while it runs; nothing of gevent's
    needs to run meanwhile (the broker is another process).
    """
    import nsq
    from tornado.ioloop import IOLoop

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    io_loop = IOLoop.current()
    finished = asyncio.Event()
    elapsed: list[float] = []
    writer = nsq.Writer([address])

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


def _check(data: Any) -> None:
    import nsq

    if isinstance(data, (nsq.Error, Exception)):
        raise RuntimeError(f"pynsq publish failed: {data}")


def pynsq_sequential(address: str, topic: str, body: bytes, count: int) -> float:
    def drive(writer: Any, done: Callable[[], None]) -> None:
        left = [count]

        def answered(conn: Any, data: Any) -> None:
            _check(data)
            left[0] -= 1
            if left[0]:
                writer.pub(topic, body, callback=answered)
            else:
                done()

        writer.pub(topic, body, callback=answered)

    return _run_pynsq(address, drive)


def pynsq_pipelined(address: str, topic: str, body: bytes, count: int) -> float:
    def drive(writer: Any, done: Callable[[], None]) -> None:
        state = {"sent": 0, "answered": 0}

        def send() -> None:
            state["sent"] += 1
            writer.pub(topic, body, callback=answered)

        def answered(conn: Any, data: Any) -> None:
            _check(data)
            state["answered"] += 1
            if state["sent"] < count:
                send()
            elif state["answered"] == count:
                done()

        for _ in range(CONCURRENCY):
            send()

    return _run_pynsq(address, drive)


def pynsq_mpub(address: str, topic: str, body: bytes, count: int) -> float:
    batch = [body] * BATCH

    def drive(writer: Any, done: Callable[[], None]) -> None:
        left = [count // BATCH]

        def answered(conn: Any, data: Any) -> None:
            _check(data)
            left[0] -= 1
            if left[0]:
                writer.mpub(topic, batch, callback=answered)
            else:
                done()

        writer.mpub(topic, batch, callback=answered)

    return _run_pynsq(address, drive)


# -- the run ---------------------------------------------------------------------------

WORKLOADS: list[tuple[str, int, dict[str, Callable[[str, str, bytes, int], float]]]] = [
    ("sequential PUB", 1, {"gnsqlite": ours_sequential, "pynsq": pynsq_sequential,
                           "gnsq": gnsq_sequential}),
    ("pipelined PUB x50", 2, {"gnsqlite": ours_pipelined, "pynsq": pynsq_pipelined,
                              "gnsq": gnsq_pipelined}),
    ("MPUB batches of 100", 5, {"gnsqlite": ours_mpub, "pynsq": pynsq_mpub,
                                "gnsq": gnsq_mpub}),
]  # fmt: skip


def run(
    address: str, count: int, size: int, repeat: int, http: NsqdHTTPClient | None = None
) -> None:
    """Run every workload with every client and print the table.

    With ``http``, each topic is deleted after its runs so nsqd's memory
    stays flat.
    """
    body = b"m" * size
    scales = ", ".join(f"x{scale} for {name}" for name, scale, _ in WORKLOADS if scale > 1)
    print(f"nsqd {address}; {count} messages of {size} bytes ({scales}); best of {repeat} runs")
    header = f"{'workload':<22}{'gnsqlite':>12}{'pynsq':>12}{'gnsq':>12}"
    print(header + f"{'vs pynsq':>10}{'vs gnsq':>10}")
    print("-" * (len(header) + 20))
    for index, (name, scale, clients) in enumerate(WORKLOADS):
        n = count * scale
        rates = dict.fromkeys(clients, 0.0)
        # Rounds interleave the clients, so a drift of the machine or of the
        # broker's state hits them alike; each keeps its best round.
        for round_ in range(repeat):
            for client, fn in clients.items():
                topic = f"bench{index}_{client}_{round_}"
                rates[client] = max(rates[client], n / fn(address, topic, body, n))
                if http is not None:
                    http.delete_topic(topic)
        ours = rates["gnsqlite"]
        print(
            f"{name:<22}{ours:>12,.0f}{rates['pynsq']:>12,.0f}{rates['gnsq']:>12,.0f}"
            f"{ours / rates['pynsq']:>9.2f}x{ours / rates['gnsq']:>9.2f}x"
        )
    print("figures are messages per second; higher is better")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nsqd", help="host:port of a running nsqd (default: start one)")
    parser.add_argument("--count", type=int, default=20000, help="messages per run")
    parser.add_argument("--size", type=int, default=100, help="message body size in bytes")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (best kept)")
    args = parser.parse_args()
    # gnsq logs every connection it closes at warning level; keep the table readable.
    logging.getLogger("gnsq").setLevel(logging.ERROR)
    if args.nsqd:
        run(args.nsqd, args.count, args.size, args.repeat)
        return
    with NsqdServer(mem_queue_size=10_000_000) as server:
        kind = "real nsqd" if server.is_real else "embedded broker"
        print(f"started the {kind} in a subprocess")
        run(server.tcp_address, args.count, args.size, args.repeat, server.http)


if __name__ == "__main__":
    main()
