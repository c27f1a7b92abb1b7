"""A consumer with the live dashboard attached: watch your own handler at work.

::

    pip install 'gnsqlite[dashboard]'
    gnsqlite broker &                                   # an nsqd on 127.0.0.1:4150
    seq 100000 | gnsqlite pub --topic numbers --nsqd-tcp-address 127.0.0.1:4150
    python examples/dashboard_consumer.py --topic numbers --nsqd-tcp-address 127.0.0.1:4150

Open the printed URL: rates, in-flight and RDY per connection, backoff and
the last message bodies (``Dashboard.tap`` wraps the handler to show them).
Ctrl-C closes the consumer (it drains) and the dashboard.
"""

from __future__ import annotations

import argparse
import signal
import sys

import gevent
import gevent.event

from gnsqlite.cli.wording import fail
from gnsqlite.consumer import Consumer
from gnsqlite.dashboard import Dashboard
from gnsqlite.errors import NSQError
from gnsqlite.message import Message


def handle(message: Message) -> None:
    """The application's work: here, pretend for a few milliseconds."""
    gevent.sleep(0.002)


def build_parser() -> argparse.ArgumentParser:
    """The options, each with its help and default."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True, help="the topic to read (required)")
    parser.add_argument(
        "--channel", default="dashboard-example", help="the channel to read (default %(default)s)"
    )
    parser.add_argument(
        "--nsqd-tcp-address",
        action="append",
        default=[],
        metavar="ADDR",
        help="nsqd TCP address host:port (repeatable; this or --lookupd-http-address is required)",
    )
    parser.add_argument(
        "--lookupd-http-address",
        action="append",
        default=[],
        metavar="ADDR",
        help="nsqlookupd HTTP address host:port (repeatable; this or"
        " --nsqd-tcp-address is required)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=8080,
        help="dashboard port on 127.0.0.1, 0: any free one (default %(default)s)",
    )
    return parser


def main() -> int:
    args = build_parser().parse_args()

    consumer = Consumer(
        args.topic,
        args.channel,
        nsqd_tcp_addresses=args.nsqd_tcp_address,
        lookupd_http_addresses=args.lookupd_http_address,
        max_in_flight=50,
    )
    consumer.set_handler(handle)
    dashboard = Dashboard(consumer)  # it shows each message body in its tail

    stop = gevent.event.Event()
    handlers = [gevent.signal_handler(s, stop.set) for s in (signal.SIGINT, signal.SIGTERM)]
    consumer.start()
    dashboard.start(("127.0.0.1", args.port))
    print(f"dashboard: {dashboard.url}  (Ctrl-C stops)", flush=True)
    try:
        stop.wait()
    finally:
        dashboard.stop()
        consumer.close()
        for handler in handlers:
            handler.cancel()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (NSQError, OSError) as exc:  # a bad option, a port in use: one line
        fail("dashboard_consumer", exc)
