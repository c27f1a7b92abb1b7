"""A stand-in crawler: publishes page records as JSON to the ``pages`` topic.

Each record is ``{"url", "domain", "title", "text", "fetched_at"}``; the text
is made of words drawn from a small vocabulary, so word statistics are
interesting. Run on its own::

    python examples/spark_pipeline/generator.py --nsqd-tcp-address 127.0.0.1:4150 \\
        --pages 5000 --rate 2000
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

import gevent

from gnsqlite.connection import Connection
from gnsqlite.errors import NSQError
from gnsqlite.producer import Producer
from gnsqlite.protocol.names import check_topic_name

DOMAINS = [
    "example.org",
    "news.example.com",
    "blog.example.net",
    "shop.example.io",
    "docs.example.dev",
]
WORDS = [
    "queue",
    "message",
    "topic",
    "channel",
    "spark",
    "stream",
    "batch",
    "broker",
    "gevent",
    "python",
    "nsq",
    "data",
    "page",
    "crawl",
    "link",
    "parse",
    "count",
    "word",
    "domain",
    "summary",
    "window",
    "latency",
    "throughput",
]


def page(rng: random.Random, n: int) -> dict[str, object]:
    """One fake page record."""
    domain = rng.choice(DOMAINS)
    words = rng.choices(WORDS, k=rng.randint(20, 200))
    return {
        "url": f"https://{domain}/page/{n}",
        "domain": domain,
        "title": " ".join(words[:5]),
        "text": " ".join(words),
        "fetched_at": time.time(),
    }


def publish_pages(address: str, topic: str, pages: int, rate: float, seed: int = 1) -> None:
    """Publish ``pages`` records at about ``rate`` per second, 100 per MPUB; blocks until done."""
    rng = random.Random(seed)
    producer = Producer(address)  # checks the address: ConfigError
    check_topic_name(topic)  # InvalidNameError
    probe = Connection(address)
    probe.connect()  # raises NSQConnectionError when no nsqd answers there
    probe.close()
    with producer:
        sent = 0
        started = time.monotonic()
        while sent < pages:
            chunk = [
                json.dumps(page(rng, sent + i)).encode() for i in range(min(100, pages - sent))
            ]
            producer.multi_publish(topic, chunk)
            sent += len(chunk)
            ahead = sent / rate - (time.monotonic() - started)
            if ahead > 0:
                gevent.sleep(ahead)
    print(f"generator: published {pages} pages to {topic}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nsqd-tcp-address", default="127.0.0.1:4150")
    parser.add_argument("--topic", default="pages")
    parser.add_argument("--pages", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=2000.0, help="pages per second")
    args = parser.parse_args()
    if args.pages < 0 or not args.rate > 0:
        parser.error("--pages must be 0 or more and --rate more than 0")
    publish_pages(args.nsqd_tcp_address, args.topic, args.pages, args.rate)


if __name__ == "__main__":
    try:
        main()
    except NSQError as exc:  # a bad option, or no nsqd: one line, not a traceback
        sys.exit(f"generator: {exc}")
