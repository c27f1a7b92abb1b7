"""Dead-letter topics: poison messages set aside, read back, and re-published once fixed.

A billing consumer reads ``orders``; every ``--poison-every``-th order lacks
its customer and the handler raises on it. After ``max_attempts`` failures
each poison order is published to ``orders.dead`` in a JSON envelope (topic,
channel, id, attempts, the handler's last error, the body) and finished, so
it no longer blocks the channel. Then the bug is "fixed" (the handler learns
a default customer) and the dead letters are read back, printed and
re-published to the topic they came from, where they are billed at last.
``gnsqlite pub --from-dead-letter orders.dead`` does that last step from a
shell; docs/dead-letters.md tells the whole story.

Run it against an nsqd (``gnsqlite broker`` or a real one)::

    python examples/dead_letters.py --nsqd-tcp-address 127.0.0.1:4150 --orders 20

A bad option, or no nsqd answering at the address, ends it at once with one
line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys

import gevent.event

from gnsqlite.cli.wording import EXIT_INTERRUPTED, fail, log_on_one_line
from gnsqlite.connection import Connection
from gnsqlite.consumer import Consumer
from gnsqlite.deadletter import decode_envelope
from gnsqlite.errors import NSQError
from gnsqlite.message import Message
from gnsqlite.producer import Producer


class Billing:
    """The handler of ``orders``, and what it has billed."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.billed: dict[int, str] = {}
        self.fixed = False
        self.all_billed = gevent.event.Event()

    def handle(self, message: Message) -> None:
        order = json.loads(message.body)
        customer = order.get("customer") or ("walk-in" if self.fixed else None)
        if customer is None:
            raise KeyError(f"order {order['id']} has no customer")
        self.billed[order["id"]] = customer
        if len(self.billed) == self.expected:
            self.all_billed.set()


def build_parser() -> argparse.ArgumentParser:
    """The options, each with its help and default."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--nsqd-tcp-address",
        required=True,
        metavar="ADDR",
        help="nsqd TCP address host:port (required)",
    )
    parser.add_argument(
        "--topic",
        default="orders",
        help="the orders topic; dead letters go to TOPIC.dead (default %(default)s)",
    )
    parser.add_argument(
        "--orders",
        type=int,
        default=20,
        metavar="N",
        help="orders to publish (default %(default)s)",
    )
    parser.add_argument(
        "--poison-every",
        type=int,
        default=5,
        metavar="K",
        help="every K-th order lacks its customer (default %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds each stage may take (default %(default)g)",
    )
    return parser


def main() -> int:
    parser = build_parser()
    args = parser.parse_args()
    log_on_one_line("dead_letters")  # the failures it causes: one line each, no traceback
    if args.orders < 1 or args.poison_every < 1:
        parser.error("--orders and --poison-every must be 1 or more")
    dead_topic = f"{args.topic}.dead"
    poison = [i for i in range(args.orders) if i % args.poison_every == 0]

    billing = Billing(args.orders)
    given_up = gevent.event.Event()
    dead_lettered: list[str] = []

    def on_giving_up(message: Message) -> None:  # runs once the dead letter is published
        dead_lettered.append(message.id)
        if len(dead_lettered) == len(poison):
            given_up.set()

    orders = Consumer(  # checks the options: ConfigError, InvalidNameError
        args.topic,
        "billing",
        billing.handle,
        nsqd_tcp_addresses=[args.nsqd_tcp_address],
        max_in_flight=10,
        max_attempts=2,
        requeue_delay=0.0,
        backoff=None,  # retry at once
        on_giving_up=on_giving_up,
        dead_letter_topic=dead_topic,
        dead_letter_envelope=True,
    )
    probe = Connection(args.nsqd_tcp_address)
    probe.connect()  # raises NSQConnectionError when no nsqd answers there
    probe.close()

    with Producer(args.nsqd_tcp_address) as producer:

        def redrive(message: Message) -> None:
            letter = decode_envelope(message.body)
            error = f"{letter.error.type}: {letter.error.message}" if letter.error else "?"
            print(
                f"dead letter {letter.id} from {letter.topic}/{letter.channel} after"
                f" {letter.attempts} attempts ({error}); re-publishing",
                flush=True,
            )
            producer.publish(letter.topic, letter.body)  # finished only once this succeeded

        redriver = Consumer(
            dead_topic, "redrive", redrive, nsqd_tcp_addresses=[args.nsqd_tcp_address]
        )
        producer.multi_publish(
            args.topic,
            [
                json.dumps({"id": i, **({} if i in poison else {"customer": f"c{i}"})})
                for i in range(args.orders)
            ],
        )
        orders.start()
        try:
            if not given_up.wait(args.timeout):
                sys.exit(f"dead_letters: error: only {len(dead_lettered)} dead-lettered in time")
            print(
                f"billed {len(billing.billed)} orders; {len(dead_lettered)} dead-lettered,"
                f" stats {orders.stats()['dead_letters']}",
                flush=True,
            )
            billing.fixed = True  # the bug fix is deployed: re-publish the dead letters
            redriver.start()
            if not billing.all_billed.wait(args.timeout):
                sys.exit(f"dead_letters: error: only {len(billing.billed)} orders billed in time")
        finally:
            redriver.close()
            orders.close()
    walk_ins = sorted(i for i, customer in billing.billed.items() if customer == "walk-in")
    print(
        f"done: {len(billing.billed)} orders billed, {len(walk_ins)} of them after"
        f" re-publishing their dead letters: {walk_ins}"
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except NSQError as exc:  # a bad option, or no nsqd: one line, not a traceback
        fail("dead_letters", exc)
    except KeyboardInterrupt:  # Ctrl-C before the end (docs/cli.md's exit rule)
        print("dead_letters: interrupted before every order was billed", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
