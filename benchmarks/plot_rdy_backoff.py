"""A consumer's RDY commands through a run of failures, recorded on the wire and plotted.

Not a benchmark: it draws ``docs/img/rdy-backoff.png`` from a real run::

    python benchmarks/plot_rdy_backoff.py                       # two embedded nsqd
    python benchmarks/plot_rdy_backoff.py --out /tmp/rdy.png --json /tmp/rdy.json
    python benchmarks/plot_rdy_backoff.py --nsqd 127.0.0.1:4150 --nsqd 127.0.0.1:5150
    python benchmarks/plot_rdy_backoff.py --duration 4 --fail 1 1.5   # a shorter run

A producer publishes steadily to each nsqd; one Consumer (``max_in_flight``
20, exponential backoff from 0.25 s) reads from all of them through a
:class:`Tap` each: a TCP proxy that parses what the consumer writes with the
protocol core's server-side parser and records every ``RDY``, ``FIN`` and
``REQ`` with the time it passed. The handler raises while the clock is inside
the failure window, so the consumer backs off: ``RDY 0`` everywhere, a
``RDY 1`` probe on one connection when each window ends, longer windows while
the probes fail, shorter ones once they succeed, then the full flow back.
The plot shows each connection's RDY as a step line and the FINs and REQs per
100 ms below it. Without ``--nsqd`` the nsqd are gnsqlite's embedded broker,
in this process.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import gevent
import gevent.event
import gevent.pool
import gevent.server

from gnsqlite import Consumer, Producer
from gnsqlite.flow import ExponentialBackoff
from gnsqlite.net import connect_tcp, parse_address
from gnsqlite.protocol.server import CommandParser
from gnsqlite.protocol.server_commands import STATE_SUBSCRIBED, Fin, Rdy, Req, Sub

TOPIC = "clicks"
#: What the run does, in seconds from the consumer's start.
DURATION = 12.0
FAIL_FROM, FAIL_UNTIL = 3.0, 5.0
RATE = 150.0  # messages per second published to each nsqd


@dataclass
class Record:
    """One command the consumer wrote: when (s from the start), on which tap, what."""

    t: float
    conn: str
    command: str  # "RDY", "FIN" or "REQ"
    count: int = 0  # RDY's count


@dataclass
class Tap:
    """A TCP proxy in front of one nsqd that records the consumer's RDY, FIN and REQ.

    :meth:`start` binds ``127.0.0.1`` on a free port (:attr:`address`) and
    returns at once; each accepted connection is forwarded to ``target`` by
    two greenlets the tap owns, and :meth:`stop` ends them all.
    """

    name: str
    target: str
    start_time: float
    records: list[Record]
    address: str = ""
    _server: gevent.server.StreamServer | None = None
    _pumps: gevent.pool.Group = field(default_factory=gevent.pool.Group)

    def start(self) -> Tap:
        self._server = gevent.server.StreamServer(("127.0.0.1", 0), self._handle)
        self._server.start()
        self.address = f"127.0.0.1:{self._server.server_port}"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(timeout=1)
        self._pumps.kill(block=True, timeout=1)

    def _handle(self, client: Any, _peer: Any) -> None:
        server = connect_tcp(parse_address(self.target), timeout=5)
        self._pumps.spawn(self._pump, server, client, None)
        self._pump(client, server, CommandParser())

    def _pump(self, source: Any, sink: Any, parser: CommandParser | None) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
                if parser is not None:
                    parser.feed(data)
                    while (command := parser.next_command()) is not None:
                        self._note(parser, command)
        except OSError:
            pass
        finally:
            sink.close()
            source.close()

    def _note(self, parser: CommandParser, command: object) -> None:
        t = time.monotonic() - self.start_time
        if isinstance(command, Sub):
            parser.state = STATE_SUBSCRIBED  # what nsqd does on SUB; FIN and RDY need it
        elif isinstance(command, Rdy):
            self.records.append(Record(t, self.name, "RDY", command.ready_count))
        elif isinstance(command, (Fin, Req)):
            self.records.append(Record(t, self.name, type(command).__name__.upper()))


@contextmanager
def embedded_nsqd(count: int) -> Iterator[list[str]]:
    """``count`` embedded brokers on free ports in this process; their TCP addresses."""
    from gnsqlite.broker import Broker

    with ExitStack() as stack:
        brokers = [
            Broker(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0") for _ in range(count)
        ]
        for broker in brokers:
            stack.enter_context(broker)
        yield [broker.tcp_address for broker in brokers]


def run(
    nsqd: list[str],
    duration: float = DURATION,
    fail_from: float = FAIL_FROM,
    fail_until: float = FAIL_UNTIL,
    rate: float = RATE,
) -> dict[str, Any]:
    """Consume from ``nsqd`` through taps for ``duration`` seconds; blocks that long.

    The handler raises between ``fail_from`` and ``fail_until`` seconds after
    the consumer started. Returns the settings and every recorded command.
    """
    start = time.monotonic()
    records: list[Record] = []
    taps = [Tap(f"nsqd {i + 1}", address, start, records).start() for i, address in enumerate(nsqd)]
    producers = [Producer(address) for address in nsqd]
    stop = gevent.event.Event()

    def publish(producer: Producer) -> None:
        number = 0
        while not stop.wait(1.0 / rate):
            producer.publish(TOPIC, b"click %d" % number)
            number += 1

    def handle(message: Any) -> None:
        if fail_from <= time.monotonic() - start < fail_until:
            raise RuntimeError("failing on purpose")

    consumer = Consumer(
        TOPIC,
        "plot",
        handle,
        nsqd_tcp_addresses=[t.address for t in taps],
        max_in_flight=20,
        backoff=ExponentialBackoff(base=0.25),
        requeue_delay=0.5,
    )
    publishers = gevent.pool.Group()
    try:
        for producer in producers:
            producer.start()
            publishers.spawn(publish, producer)
        consumer.start()
        stop.wait(duration)  # the clock of the run: nothing to wait for but time
    finally:
        stop.set()
        publishers.join(timeout=5)
        publishers.kill()
        consumer.close(timeout=5)
        for producer in producers:
            producer.close()
        for tap in taps:
            tap.stop()
    return {
        "nsqd": [t.name for t in taps],
        "duration": duration,
        "fail": [fail_from, fail_until],
        "max_in_flight": 20,
        "backoff_base": 0.25,
        "records": [r.__dict__ for r in records],
    }


def plot(report: dict[str, Any], path: str) -> None:
    """Each connection's RDY (steps, REQs marked) above FINs and REQs per 100 ms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [Record(**r) for r in report["records"]]
    names, end = report["nsqd"], report["duration"]
    fig, axes = plt.subplots(
        len(names) + 1, 1, figsize=(10, 2.1 * (len(names) + 1) + 0.6), sharex=True
    )
    for ax in axes:
        ax.axvspan(*report["fail"], color="#f4c7c3", alpha=0.6, lw=0)
        ax.grid(alpha=0.3)
    top = report["max_in_flight"]
    for ax, name in zip(axes, names, strict=False):
        rdy = [r for r in records if r.conn == name and r.command == "RDY"]
        xs = [r.t for r in rdy] + [end]
        ys = [r.count for r in rdy] + [rdy[-1].count if rdy else 0]
        ax.step(xs, ys, where="post", color="#1f6fb2", label="RDY sent")
        ax.plot([r.t for r in rdy], [r.count for r in rdy], "o", ms=3, color="#1f6fb2")
        reqs = [r.t for r in records if r.conn == name and r.command == "REQ"]
        ax.plot(reqs, [top * 0.9] * len(reqs), "v", color="#c62828", label="REQ (a failure)")
        ax.set_ylim(-1, top + 1)
        ax.set_ylabel(f"RDY to {name}")
        ax.legend(loc="upper right", fontsize=8)
    axes[0].set_title(
        f"A Consumer of {len(names)} nsqd (max_in_flight {top}, exponential backoff from"
        f" {report['backoff_base']} s); its handler raises in the shaded time",
        fontsize=10,
    )
    bottom = axes[-1]
    bins = [i * 0.1 for i in range(int(end * 10) + 1)]
    for command, color in (("FIN", "#2e7d32"), ("REQ", "#c62828")):
        times = [r.t for r in records if r.command == command]
        bottom.hist(times, bins=bins, histtype="step", color=color, label=f"{command}s")
    bottom.set_yscale("symlog", linthresh=10)
    bottom.set_ylabel("per 100 ms")
    bottom.set_xlabel("seconds since the consumer started (dots: each RDY written)")
    bottom.legend(loc="upper left", fontsize=8)
    bottom.set_xlim(0, end)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--out",
        default="docs/img/rdy-backoff.png",
        help="the PNG to write (default docs/img/rdy-backoff.png)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the recorded commands as JSON")
    parser.add_argument("--from-json", metavar="PATH", help="plot a recording, run nothing")
    parser.add_argument(
        "--nsqd",
        action="append",
        metavar="HOST:PORT",
        help="an nsqd to use (repeatable; default: two embedded ones)",
    )
    parser.add_argument(
        "--duration", type=float, default=DURATION, help=f"seconds to run (default {DURATION})"
    )
    parser.add_argument(
        "--fail",
        type=float,
        nargs=2,
        default=[FAIL_FROM, FAIL_UNTIL],
        metavar=("FROM", "UNTIL"),
        help=f"seconds between which the handler raises (default {FAIL_FROM} {FAIL_UNTIL})",
    )
    args = parser.parse_args(argv)
    # The handler fails on purpose: one traceback per failure would bury the summary.
    logging.getLogger("gnsqlite").setLevel(logging.CRITICAL)
    if args.from_json:
        with open(args.from_json) as f:
            report = json.load(f)
    elif args.nsqd:
        report = run(args.nsqd, args.duration, *args.fail)
    else:
        with embedded_nsqd(2) as addresses:
            report = run(addresses, args.duration, *args.fail)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    plot(report, args.out)
    count = {c: sum(r["command"] == c for r in report["records"]) for c in ("RDY", "FIN", "REQ")}
    print(
        f"wrote {args.out}: {count['RDY']} RDY, {count['FIN']} FIN and {count['REQ']} REQ"
        f" (the handler's failures) in {report['duration']} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
