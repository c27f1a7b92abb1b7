"""What a dead-letter topic costs on the give-up path.

Every message fails once (``max_attempts=1``, requeued without delay) and is
given up on its second delivery: by the default hook only, or published to a
dead-letter topic first (raw body, or JSON envelope). Prints, for each mode,
the messages given up per second and the time until the channel drained.
An nsqd runs in a subprocess (the embedded one, or the real one with
``GNSQLITE_NSQD=/path/to/nsq/bin``). Not a test; not run in CI::

    python benchmarks/bench_dead_letters.py [--messages 5000] [--size 200] [--max-in-flight 100]
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

import gevent.event

from gnsqlite.consumer import Consumer
from gnsqlite.message import Message
from gnsqlite.producer import Producer
from gnsqlite.testing import NsqdServer, nsq_bin_dir


def run(nsqd: NsqdServer, mode: str, messages: int, size: int, max_in_flight: int) -> float:
    """Give up ``messages`` messages in ``mode``; returns the seconds it took."""
    topic = f"bench_{mode}"
    with Producer(nsqd.tcp_address) as producer:
        body = b"x" * size
        for start in range(0, messages, 500):
            producer.multi_publish(topic, [body] * min(500, messages - start))
    done = gevent.event.Event()
    given_up = 0

    def hook(message: Message) -> None:
        nonlocal given_up
        given_up += 1
        if given_up == messages:
            done.set()

    def fail(message: Message) -> None:
        raise ValueError("always")

    dead: dict[str, Any] = {}
    if mode != "hook":
        dead = {"dead_letter_topic": f"{topic}.dead", "dead_letter_envelope": mode == "envelope"}
    consumer = Consumer(
        topic,
        "ch",
        fail,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=max_in_flight,
        max_attempts=1,
        requeue_delay=0.0,
        backoff=None,
        on_giving_up=hook,
        **dead,
    )
    started = time.perf_counter()
    consumer.start()
    try:
        if not done.wait(300):
            raise SystemExit(f"{mode}: only {given_up} of {messages} given up in 300 s")
        return time.perf_counter() - started
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--size", type=int, default=200, help="body bytes")
    parser.add_argument("--max-in-flight", type=int, default=100)
    args = parser.parse_args()
    logging.disable(logging.ERROR)  # the handler's failures are the point, not news
    with NsqdServer(bin_dir=nsq_bin_dir()) as nsqd:
        kind = "real nsqd" if nsqd.is_real else "embedded nsqd"
        print(
            f"{args.messages} messages of {args.size} bytes, max_in_flight"
            f" {args.max_in_flight}, {kind}; each fails once, then is given up"
        )
        for mode in ("hook", "raw", "envelope"):
            seconds = run(nsqd, mode, args.messages, args.size, args.max_in_flight)
            print(f"{mode:>9}: {seconds:6.2f} s  {args.messages / seconds:8,.0f} given up/s")


if __name__ == "__main__":
    main()
