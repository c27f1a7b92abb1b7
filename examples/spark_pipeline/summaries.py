"""Prints the per-batch summaries the Spark job publishes to ``page_stats``.

Exits once the summaries account for ``--pages`` pages (or never, with 0)::

    python examples/spark_pipeline/summaries.py --nsqd-tcp-address 127.0.0.1:4150 --pages 5000
"""

from __future__ import annotations

import argparse
import json
import sys

import gevent.event

from gnsqlite.connection import Connection
from gnsqlite.consumer import Consumer
from gnsqlite.errors import NSQError
from gnsqlite.message import Message


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nsqd-tcp-address", default="127.0.0.1:4150")
    parser.add_argument("--topic", default="page_stats")
    parser.add_argument("--pages", type=int, default=0, help="exit after this many pages")
    args = parser.parse_args()
    seen = 0
    done = gevent.event.Event()

    def show(message: Message) -> None:
        nonlocal seen
        s = json.loads(message.body)
        seen += s["pages"]
        top = ", ".join(f"{w}={c}" for w, c in s["top_words"][:3])
        domains = ", ".join(f"{d}={c}" for d, c in sorted(s["domains"].items()))
        print(
            f"batch {s['batch']}: {s['pages']} pages, {s['words']} words"
            f" ({s['avg_words']:.1f}/page); domains: {domains}; top words: {top}",
            flush=True,
        )
        if args.pages and seen >= args.pages:
            done.set()

    consumer = Consumer(
        args.topic, "print", show, nsqd_tcp_addresses=[args.nsqd_tcp_address], max_in_flight=10
    )  # checks the options: ConfigError, InvalidNameError
    probe = Connection(args.nsqd_tcp_address)
    probe.connect()  # raises NSQConnectionError when no nsqd answers there
    probe.close()
    with consumer:
        done.wait()
    print(f"summaries: {seen} pages summarized", flush=True)


if __name__ == "__main__":
    try:
        main()
    except NSQError as exc:  # a bad option, or no nsqd: one line, not a traceback
        sys.exit(f"summaries: {exc}")
