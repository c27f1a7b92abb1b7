"""``gnsqlite demo``: the whole thing on one machine, with one command.

Starts in this process an nsqlookupd, ``--nsqd`` embedded nsqd registered
with it, a producer publishing a steady stream of sample click records
(``--rate`` per second, spread over the nsqd), a consumer that finds the
nsqd through lookupd (one connection each) and sometimes fails a message so
requeues and backoff show, and the live dashboard. Prints the dashboard's
URL and a one-line summary that updates live; Ctrl-C stops everything
cleanly (exit 0).
"""

from __future__ import annotations

import itertools
import json
import logging
import random
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import gevent
import gevent.event

from ..broker import Broker
from ..broker.lookupd import Lookupd
from ..consumer import Consumer
from ..errors import NSQError
from ..message import Message, RequeueMessage
from ..producer import Producer
from ._common import CommandError, Parser, configure_logging, run, stop_on_signals

__all__ = ["build_parser", "main", "sample_record"]

log = logging.getLogger(__name__)

TOPIC = "clicks"
CHANNEL = "dashboard-demo"
_PAGES = ("/", "/pricing", "/docs", "/blog/gevent", "/signup", "/docs/nsq")
_EXAMPLES = """
examples:
  gnsqlite demo                         # dashboard on http://127.0.0.1:8080/
  gnsqlite demo --port 0 --rate 200     # a free port, 200 records a second
  gnsqlite demo --no-dashboard          # only the summary line

The dashboard needs the extra: pip install 'gnsqlite[dashboard]'.
"""


def build_parser() -> Parser:
    """The ``demo`` argument parser."""
    parser = Parser(
        prog="gnsqlite demo",
        description="Run a broker, lookupd, producer, consumer and the live dashboard.",
        epilog=_EXAMPLES,
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="dashboard address (default %(default)s)"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=8080,
        help="dashboard port, 0: any free one (default %(default)s)",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=50.0,
        help="records published per second (default %(default)g)",
    )
    parser.add_argument(
        "--nsqd", type=int, default=3, help="embedded nsqd to start, 1-10 (default %(default)s)"
    )
    parser.add_argument(
        "--fail-rate",
        type=float,
        default=0.02,
        help="fraction of messages the handler fails, requeued (default %(default)g)",
    )
    parser.add_argument("--no-dashboard", action="store_true", help="do not serve the dashboard")
    parser.add_argument("--verbose", action="store_true", help="log what the library does")
    return parser


def sample_record(n: int, rng: random.Random) -> bytes:
    """A sample click record (JSON); every 25th has HTML in it, which the page shows as text."""
    record: dict[str, Any] = {
        "n": n,
        "user": f"user{rng.randrange(1000):03d}",
        "page": rng.choice(_PAGES),
        "ms": rng.randrange(5, 900),
        "ts": round(time.time(), 3),
    }
    if n % 25 == 0:
        record["referrer"] = "<a href='https://example.com'>example</a>"
    return json.dumps(record).encode("utf-8")


def main(argv: Sequence[str]) -> int:
    """Run ``gnsqlite demo`` until Ctrl-C; returns the exit status."""
    args = build_parser().parse_args(list(argv))
    args.prog = "gnsqlite demo"
    return run(_demo, args)


class _Demo:
    """Everything the demo starts, in order, so :meth:`stop` can undo it."""

    def __init__(self, args: Any) -> None:
        self.args = args
        self.rng = random.Random()
        self.lookupd = Lookupd("127.0.0.1:0", "127.0.0.1:0", broadcast_address="127.0.0.1")
        self.brokers: list[Broker] = []
        self.producer: Producer | None = None
        self.consumer: Consumer | None = None
        self.dashboard: Any = None
        self.publisher: gevent.Greenlet[Any, Any] | None = None
        self.published = 0  # acknowledged publishes, the first one per nsqd included
        self.finished = 0  # handler runs that returned (the consumer then FINs)
        self.requeued = 0
        self.given_up = 0
        self.finished_ids: set[tuple[str, str]] = set()  # (nsqd, id): ids are per nsqd
        self.unconfirmed = 0  # publishes sent without an answer (failed, or cut short by stop)
        self.final: str | None = None  # the reconciliation, taken when stopping
        self.work: Callable[[Message], Any] = self.handle_message

    def start(self) -> None:
        args = self.args
        self.lookupd.start()
        for _ in range(args.nsqd):
            broker = Broker(
                tcp_address="127.0.0.1:0",
                http_address="127.0.0.1:0",
                broadcast_address="127.0.0.1",
                lookupd_tcp_addresses=[self.lookupd.tcp_address],
            )
            broker.start()
            self.brokers.append(broker)
        self.producer = Producer([b.tcp_address or "" for b in self.brokers])
        self.producer.start()
        for _ in range(len(self.brokers)):  # the topic exists on every nsqd, so lookupd lists it
            self.producer.publish(TOPIC, sample_record(0, self.rng))
            self.published += 1  # counted: these are consumed like the others
        self.consumer = Consumer(
            TOPIC,
            CHANNEL,
            self.handle,
            lookupd_http_addresses=[self.lookupd.http_address],
            max_in_flight=30,
            lookupd_poll_interval=2.0,
            max_backoff_duration=2.0,
            on_giving_up=self.give_up,
        )
        if not args.no_dashboard:
            from ..dashboard import Dashboard

            self.dashboard = Dashboard(self.consumer, self.producer)
            self.dashboard.start((args.host, args.port))
        self.consumer.start()
        self.publisher = gevent.spawn(self.publish_forever)

    def handle(self, message: Message) -> None:
        try:
            self.work(message)
        except RequeueMessage:
            self.requeued += 1
            raise
        self.finished += 1
        self.finished_ids.add((message.nsqd, message.id))

    def give_up(self, message: Message) -> None:
        self.given_up += 1

    def left_in_nsqd(self) -> int | None:
        """Messages still in the channel on every nsqd (queued, in flight, deferred)."""
        from ..http import NsqdHTTPClient

        left = 0
        try:
            for broker in self.brokers:
                stats = NsqdHTTPClient(broker.http_address or "", timeout=2.0).stats(
                    topic=TOPIC, channel=CHANNEL
                )
                for topic in stats.get("topics", []):
                    for channel in topic.get("channels", []):
                        left += sum(
                            int(channel.get(key, 0))
                            for key in ("depth", "in_flight_count", "deferred_count")
                        )
        except (NSQError, OSError):
            return None
        return left

    def reconciliation(self) -> str:
        """``published = finished + given up + left in nsqd``, or why not."""
        unique = len(self.finished_ids)
        left = self.left_in_nsqd()
        dups = self.finished - unique
        figures = (
            f"published {self.published:,} = finished {unique:,} + given up {self.given_up:,}"
            f" + left in nsqd {'?' if left is None else f'{left:,}'}"
        )
        total = None if left is None else unique + self.given_up + left
        if total == self.published:
            verdict = "reconciled"
        elif total is not None and self.published < total <= self.published + self.unconfirmed:
            verdict = (
                f"reconciled with {total - self.published} of {self.unconfirmed} publishes"
                " nsqd stored without our hearing the answer (stopped or failed mid-publish)"
            )
        else:
            verdict = "NOT reconciled" if left is not None else "nsqd did not answer /stats"
        more = f"; {dups:,} redelivered after finishing (handled twice)" if dups else ""
        return f"{figures}: {verdict}{more}; requeued {self.requeued:,} times"

    def handle_message(self, message: Message) -> None:
        gevent.sleep(self.rng.uniform(0.001, 0.02))  # pretend to work
        if self.rng.random() < self.args.fail_rate:
            raise RequeueMessage(delay=0.5, backoff=True)  # a simulated failure

    def publish_forever(self) -> None:
        assert self.producer is not None
        period = 1.0 / self.args.rate
        next_at = time.monotonic()
        for n in itertools.count(1):
            self.unconfirmed += 1  # stored or not: we may never hear (stopped, or it failed)
            try:
                self.producer.publish(TOPIC, sample_record(n, self.rng))
                self.published += 1
                self.unconfirmed -= 1
            except NSQError as exc:
                log.warning("demo: publish failed: %s", exc)
            next_at += period
            gevent.sleep(max(0.0, next_at - time.monotonic()))
            if next_at < time.monotonic() - 1.0:
                next_at = time.monotonic()

    def summary(self) -> str:
        stats = self.consumer.stats() if self.consumer is not None else {"totals": {}}
        t = stats["totals"]
        backoff = (stats.get("backoff") or {}).get("state", "off")
        return (
            f"published {self.published:,}  received {t.get('received', 0):,}"
            f"  finished {t.get('finished', 0):,}  requeued {t.get('requeued', 0):,}"
            f"  in-flight {t.get('in_flight', 0)}  connections {len(stats.get('connections', []))}"
            f"  backoff {backoff}"
        )

    def stop(self) -> None:
        if self.publisher is not None:
            self.publisher.kill()
        if self.dashboard is not None:
            self.dashboard.stop()
        if self.consumer is not None:
            self.consumer.close(timeout=5.0)
        if self.producer is not None:
            self.producer.close()
        if self.final is None and self.consumer is not None:
            self.final = self.reconciliation()  # before the brokers go
        for broker in self.brokers:
            broker.stop()
        self.lookupd.stop()


def _demo(args: Any) -> int:
    configure_logging(args.verbose)
    if not 1 <= args.nsqd <= 10:
        raise CommandError("--nsqd must be between 1 and 10", 2)
    if not args.rate > 0:
        raise CommandError("--rate must be more than 0", 2)
    if not 0 <= args.fail_rate < 1:
        raise CommandError("--fail-rate must be at least 0 and below 1", 2)
    demo = _Demo(args)
    stop = gevent.event.Event()
    tty = sys.stdout.isatty()
    with stop_on_signals(stop):
        try:
            demo.start()
        except ImportError as exc:
            demo.stop()
            raise CommandError(f"{exc} (or run with --no-dashboard)") from None
        except OSError as exc:
            demo.stop()
            raise CommandError(f"cannot listen: {exc}") from None
        except BaseException:
            demo.stop()
            raise
        try:
            if demo.dashboard is not None:
                print(f"dashboard: {demo.dashboard.url}", flush=True)
            print(
                f"nsqlookupd HTTP {demo.lookupd.http_address}; nsqd TCP "
                + ", ".join(b.tcp_address or "" for b in demo.brokers)
                + f"; topic {TOPIC!r}; Ctrl-C stops",
                flush=True,
            )
            while not stop.wait(1.0 if tty else 5.0):
                if tty:
                    sys.stdout.write("\r" + demo.summary() + "\x1b[K")
                else:
                    sys.stdout.write(demo.summary() + "\n")
                sys.stdout.flush()
        finally:
            if tty:
                sys.stdout.write("\n")
            last = demo.summary()
            print("stopping...", flush=True)
            demo.stop()
            print(f"stopped; {last}", flush=True)
            if demo.final is not None:
                print(demo.final, flush=True)
    return 0
