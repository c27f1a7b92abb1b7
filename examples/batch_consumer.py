"""Batch processing with the consumer's starvation signal.

A handler that writes to a database or an API is fastest in batches. This
one takes each message asynchronously (``message.enable_async()``), adds it
to a batch, and a flusher greenlet processes the batch when the consumer is
**starved**: its in-flight messages reached 85% of its RDY, so no more will
come until some are answered. A timeout flushes the tail of a stream, which
never fills a batch.

Run it against an nsqd (``gnsqlite broker`` or a real one)::

    python examples/batch_consumer.py --nsqd-tcp-address 127.0.0.1:4150 \\
        --topic events --publish 1000 --count 1000 --max-in-flight 100

A bad option, or no nsqd answering at the address, ends it at once with one
line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import sys

import gevent

from gnsqlite.conn import Connection
from gnsqlite.consumer import Consumer
from gnsqlite.errors import NSQError
from gnsqlite.message import Message
from gnsqlite.producer import Producer


class BatchWriter:
    """Collects messages and answers them a batch at a time."""

    def __init__(self, flush_timeout: float) -> None:
        self.flush_timeout = flush_timeout
        self.batch: list[Message] = []
        self.processed = 0

    def handle(self, message: Message) -> None:
        message.enable_async()  # answered by flush(), not when handle returns
        self.batch.append(message)

    def flush(self, reason: str) -> None:
        batch, self.batch = self.batch, []
        # ... write the whole batch to the database here, in one call ...
        for message in batch:
            message.finish()
        self.processed += len(batch)
        print(f"processed a batch of {len(batch)} ({reason})", flush=True)

    def run(self, consumer: Consumer, count: int | None) -> None:
        """Flush whenever the consumer starves, or after ``flush_timeout`` s of waiting."""
        while count is None or self.processed < count:
            starved = consumer.wait_starved(timeout=self.flush_timeout)
            if self.batch:
                self.flush("starved" if starved else "timeout")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nsqd-tcp-address", required=True)
    parser.add_argument("--topic", default="events")
    parser.add_argument("--channel", default="batch")
    parser.add_argument("--max-in-flight", type=int, default=100)
    parser.add_argument("--flush-timeout", type=float, default=1.0, help="seconds")
    parser.add_argument("--publish", type=int, default=0, help="publish this many first")
    parser.add_argument("--count", type=int, default=None, help="stop after this many")
    args = parser.parse_args()
    if not args.flush_timeout > 0:
        parser.error("--flush-timeout must be more than 0 seconds")

    writer = BatchWriter(args.flush_timeout)
    consumer = Consumer(  # checks the options: ConfigError, InvalidNameError
        args.topic,
        args.channel,
        writer.handle,
        nsqd_tcp_addresses=[args.nsqd_tcp_address],
        max_in_flight=args.max_in_flight,
    )
    probe = Connection(args.nsqd_tcp_address)
    probe.connect()  # raises NSQConnectionError when no nsqd answers there
    probe.close()
    if args.publish:
        with Producer(args.nsqd_tcp_address) as producer:
            bodies = [b"event %d" % i for i in range(args.publish)]
            for start in range(0, len(bodies), 100):
                producer.multi_publish(args.topic, bodies[start : start + 100])

    consumer.start()
    try:
        gevent.spawn(writer.run, consumer, args.count).get()
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    print(f"done: {writer.processed} messages")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except NSQError as exc:  # a bad option, or no nsqd: one line, not a traceback
        sys.exit(f"batch_consumer: {exc}")
