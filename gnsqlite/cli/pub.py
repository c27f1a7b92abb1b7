"""``gnsqlite pub``: publish the records of a file (or stdin) in MPUB batches.

Records are separated by ``--delimiter`` (a newline by default, escapes such
as ``\\0`` or ``\\t`` understood); empty records are skipped, since nsqd
refuses empty bodies. On a terminal a progress line shows the count and
rate; otherwise one summary line is printed at the end. Ctrl-C stops after
the batches already sent are answered.

``--from-dead-letter TOPIC`` instead re-publishes the dead letters of TOPIC
to their original topics (see :mod:`gnsqlite.cli._redrive`).
"""

from __future__ import annotations

import codecs
import collections
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import IO, Any

import gevent
import gevent.event
from gevent.fileobject import FileObjectPosix

from ..errors import NoConnectionsError
from ..producer import Producer
from ..protocol import check_topic_name
from ._common import (
    CommandError,
    Parser,
    check_reachable,
    configure_logging,
    normalize_address,
    run,
    stop_on_signals,
)
from ._redrive import redrive

__all__ = ["build_parser", "main", "read_records"]

_CHUNK = 64 * 1024
_WINDOW = 8  # MPUB batches awaiting nsqd's answer at once
_PROGRESS_EVERY = 0.2  # seconds between progress redraws

_EXAMPLES = """
examples:
  seq 100000 | gnsqlite pub --topic numbers --nsqd-tcp-address 127.0.0.1:4150
  gnsqlite pub --topic events --nsqd-tcp-address 127.0.0.1:4150 events.jsonl --batch 500
  find . -print0 | gnsqlite pub --topic files --nsqd-tcp-address 127.0.0.1:4150 --delimiter '\\0'
  gnsqlite pub --from-dead-letter orders.dead --nsqd-tcp-address 127.0.0.1:4150

--from-dead-letter TOPIC reads the dead letters of TOPIC on --channel
(default 'redrive') and publishes each envelope's original body to its
original topic (--to TOPIC overrides it; raw dead letters need --to),
finishing each dead letter only once nsqd took the re-published message.
It stops after -n messages, or when nothing came for --idle-timeout seconds.
A new channel on a topic that already has channels sees only new messages:
create the redrive channel before dead letters arrive.
"""


def build_parser() -> Parser:
    """The ``pub`` argument parser."""
    parser = Parser(
        prog="gnsqlite pub",
        description="Publish the records of FILE (or stdin) to a topic, in MPUB batches.",
        epilog=_EXAMPLES,
    )
    parser.add_argument("file", nargs="?", default="-", metavar="FILE",
                        help="the input file; '-' or nothing reads stdin")  # fmt: skip
    parser.add_argument("--topic", help="the topic to publish to (unless --from-dead-letter)")
    parser.add_argument(
        "--nsqd-tcp-address", action="append", default=[], metavar="ADDR", required=True,
        help="nsqd TCP address host:port (repeatable: batches are spread, with failover)",
    )  # fmt: skip
    parser.add_argument("--batch", type=int, default=100,
                        help="records per MPUB (default %(default)s)")  # fmt: skip
    parser.add_argument("--delimiter", default="\\n",
                        help="record separator, escapes allowed (default '\\n')")  # fmt: skip
    parser.add_argument("--verbose", action="store_true", help="log connections to stderr")
    dead = parser.add_argument_group("re-publishing dead letters")
    dead.add_argument("--from-dead-letter", metavar="TOPIC",
                      help="re-publish the dead letters of TOPIC to their original topic")
    dead.add_argument("--channel", help="the channel of TOPIC to read (default redrive)")
    dead.add_argument("--to", metavar="TOPIC",
                      help="publish every body to this topic (needed for raw dead letters)")
    dead.add_argument("-n", "--count", type=int, metavar="N",
                      help="stop after N dead letters (default 0: until idle)")
    dead.add_argument("--idle-timeout", type=float, metavar="S",
                      help="stop when nothing came for S seconds (default 2)")
    return parser


def read_records(stream: IO[bytes], delimiter: bytes) -> Iterator[bytes]:
    """The non-empty records of ``stream`` split on ``delimiter``; reads 64 KiB at a time."""
    pending = b""
    while True:
        chunk = stream.read(_CHUNK)
        if not chunk:
            break
        pending += chunk
        parts = pending.split(delimiter)
        pending = parts.pop()
        yield from (p for p in parts if p)
    if pending:
        yield pending


class _Progress:
    """A progress line on a terminal (redrawn in place) or a final summary."""

    def __init__(self, out: IO[str], tty: bool, total_bytes: int | None) -> None:
        self.out = out
        self.tty = tty
        self.total_bytes = total_bytes
        self.start = time.monotonic()
        self.last_draw = 0.0

    def update(self, count: int, read_bytes: int, final: bool = False) -> None:
        now = time.monotonic()
        if not self.tty or (not final and now - self.last_draw < _PROGRESS_EVERY):
            return
        self.last_draw = now
        rate = count / max(now - self.start, 1e-6)
        bar = ""
        if self.total_bytes:
            done = min(1.0, read_bytes / self.total_bytes)
            filled = int(done * 30)
            bar = f"[{'#' * filled}{'.' * (30 - filled)}] {done:4.0%} "
        self.out.write(f"\r{bar}{count:,} messages  {rate:,.0f} msg/s ")
        self.out.flush()

    def summary(self, count: int, batches: int, topic: str, interrupted: bool) -> None:
        elapsed = time.monotonic() - self.start
        if self.tty:
            self.out.write("\n")
        rate = count / elapsed if elapsed > 0 else 0.0
        how = " (interrupted)" if interrupted else ""
        self.out.write(
            f"published {count:,} messages to {topic!r} in {batches:,} MPUB batches,"
            f" {elapsed:.2f} s, {rate:,.0f} msg/s{how}\n"
        )
        self.out.flush()


def main(argv: Sequence[str]) -> int:
    """Run ``gnsqlite pub``; blocks until the input is published or Ctrl-C."""
    args = build_parser().parse_args(list(argv))
    args.prog = "gnsqlite pub"
    return run(_pub, args)


def _pub(args: Any) -> int:
    configure_logging(args.verbose)
    if args.from_dead_letter is not None:
        if args.topic is not None or args.file != "-":
            raise CommandError("--from-dead-letter reads no FILE and takes --to, not --topic", 2)
        return redrive(args)
    if args.topic is None:
        raise CommandError("--topic is required (or --from-dead-letter TOPIC)", 2)
    for name in ("to", "channel", "count", "idle_timeout"):
        if getattr(args, name) is not None:
            flag = "--" + name.replace("_", "-")
            raise CommandError(f"{flag} goes with --from-dead-letter", 2)
    topic = check_topic_name(args.topic)
    if args.batch < 1:
        raise CommandError(f"--batch {args.batch} is out of range: use 1 or more", 2)
    try:
        delimiter = codecs.decode(args.delimiter, "unicode_escape").encode("utf-8")
    except UnicodeDecodeError as exc:
        raise CommandError(f"bad --delimiter {args.delimiter!r}: {exc}", 2) from None
    if not delimiter:
        raise CommandError("--delimiter cannot be empty", 2)
    addresses = [normalize_address(a, "nsqd TCP") for a in args.nsqd_tcp_address]
    stream: Any
    if args.file == "-":
        # a cooperative reader, so a Ctrl-C is handled while stdin has nothing to give
        stream = (
            sys.stdin.buffer
            if sys.stdin.isatty()
            else FileObjectPosix(sys.stdin.fileno(), "rb", close=False)
        )
        total = None
    else:
        try:
            stream = open(args.file, "rb")  # noqa: SIM115 (closed below)
            total = os.fstat(stream.fileno()).st_size
        except OSError as exc:
            raise CommandError(f"cannot read {args.file}: {exc.strerror or exc}", 2) from None
    try:
        for address in addresses:
            check_reachable(address, "nsqd")
        return _publish_all(args, topic, addresses, stream, delimiter, total)
    finally:
        if args.file != "-":
            stream.close()


def _publish_all(
    args: Any,
    topic: str,
    addresses: list[str],
    stream: IO[bytes],
    delimiter: bytes,
    total: int | None,
) -> int:
    progress = _Progress(sys.stdout, sys.stdout.isatty(), total)
    stop = gevent.event.Event()
    producer = Producer(addresses, timeout=30.0)
    pending: collections.deque[gevent.event.AsyncResult[bytes]] = collections.deque()
    count = batches = read_bytes = 0
    batch: list[bytes] = []

    def send() -> None:
        nonlocal batches
        while len(pending) >= _WINDOW:
            pending.popleft().get()
        pending.append(producer.multi_publish_async(topic, batch))
        batches += 1

    with stop_on_signals(stop), producer:
        if not producer.connections:
            raise CommandError(f"cannot connect to nsqd at {', '.join(addresses)}")
        try:
            for record in read_records(stream, delimiter):
                if stop.is_set():
                    break
                batch.append(record)
                read_bytes += len(record) + len(delimiter)
                if len(batch) >= args.batch:
                    send()
                    count += len(batch)
                    batch = []
                    progress.update(count, read_bytes)
                    gevent.sleep(0)  # lets a Ctrl-C through on a fast input
            if batch and not stop.is_set():
                send()
                count += len(batch)
            while pending:
                pending.popleft().get()
        except NoConnectionsError as exc:
            raise CommandError(f"publishing failed: {' '.join(str(exc).split())}") from None
    progress.update(count, read_bytes, final=True)
    if count == 0 and not stop.is_set():
        print("nothing to publish: the input has no records", file=sys.stderr)
    progress.summary(count, batches, topic, stop.is_set())
    return 130 if stop.is_set() else 0
