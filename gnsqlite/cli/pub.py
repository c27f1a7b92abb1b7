"""``gnsqlite pub``: publish the records of a file (or stdin) in MPUB batches.

Records are separated by ``--delimiter`` (a newline by default, escapes such
as ``\\0`` or ``\\t`` understood); empty records are skipped, since nsqd
refuses empty bodies. On a terminal a progress line shows the count and
rate; otherwise one summary line is printed at the end.

Input is published as it arrives: a batch goes when it holds ``--batch``
records, or ``--flush-interval`` seconds after its first record came, so
``tail -f app.log | gnsqlite pub ...`` publishes each line within that time
whatever the pace of the input. Ctrl-C stops reading at once; every record
read before it is published (its answer awaited) or counted on stderr as not
published (exit 130; 1 if nsqd refused any).

The nsqd are given (``--nsqd-tcp-address``, repeatable) or found through
nsqlookupd (``--lookupd-http-address``, repeatable: every nsqd it lists,
polled again every minute; see :class:`~gnsqlite.producer.Producer`).
Batches are spread over the nsqd in turn, with failover.

``--from-dead-letter TOPIC`` instead re-publishes the dead letters of TOPIC
to their original topics (see :mod:`gnsqlite.cli._redrive`).
"""

from __future__ import annotations

import codecs
import collections
import os
import sys
import time
from collections.abc import Sequence
from typing import IO, Any

import gevent
import gevent.event

from ..errors import NSQError
from ..producer import Producer
from ..protocol import check_topic_name
from ._common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    CommandError,
    Parser,
    add_address_arguments,
    configure_logging,
    reach_addresses,
    run,
    stop_on_signals,
    topology_addresses,
)
from ._records import RecordReader, read_records
from ._redrive import redrive

__all__ = ["build_parser", "main", "read_records"]

_WINDOW = 8  # MPUB batches awaiting nsqd's answer at once
_PROGRESS_EVERY = 0.2  # seconds between progress redraws

_EXAMPLES = """
examples:
  seq 100000 | gnsqlite pub --topic numbers --nsqd-tcp-address 127.0.0.1:4150
  seq 100000 | gnsqlite pub --topic numbers --lookupd-http-address 127.0.0.1:4161
  gnsqlite pub --topic events --nsqd-tcp-address 127.0.0.1:4150 events.jsonl --batch 500
  find . -print0 | gnsqlite pub --topic files --nsqd-tcp-address 127.0.0.1:4150 --delimiter '\\0'
  gnsqlite pub --from-dead-letter orders.dead --nsqd-tcp-address 127.0.0.1:4150
  gnsqlite pub --from-dead-letter orders.dead --lookupd-http-address 127.0.0.1:4161

--from-dead-letter TOPIC reads the dead letters of TOPIC on --channel
(default 'redrive') and publishes each envelope's original body to its
original topic (--to TOPIC overrides it; raw dead letters need --to),
finishing each dead letter only once nsqd took the re-published message.
It stops after -n messages, or when nothing came for --idle-timeout seconds.
With --lookupd-http-address it reads every nsqd nsqlookupd lists with TOPIC
(none: nothing to do, exit 0) and publishes through nsqlookupd's nsqd.
A new channel on a topic that already has channels sees only new messages:
create the redrive channel before dead letters arrive.
"""


def build_parser() -> Parser:
    """The ``pub`` argument parser."""
    parser = Parser(
        prog="gnsqlite pub",
        usage="%(prog)s --topic TOPIC --nsqd-tcp-address ADDR [options] [FILE]\n"
        "       %(prog)s --topic TOPIC --lookupd-http-address ADDR [options] [FILE]\n"
        "       %(prog)s --from-dead-letter TOPIC (--nsqd-tcp-address ADDR"
        " | --lookupd-http-address ADDR) [options]",
        description="Publish the records of FILE (or stdin) to a topic, in MPUB batches.",
        epilog=_EXAMPLES,
    )
    parser.add_argument(
        "file",
        nargs="?",
        default="-",
        metavar="FILE",
        help="the input file; '-' or nothing reads stdin (default -)",
    )
    parser.add_argument(
        "--topic", help="the topic to publish to (required, unless --from-dead-letter)"
    )
    add_address_arguments(parser, "batches are spread, with failover")
    parser.add_argument(
        "--batch", type=int, default=100, help="records per MPUB (default %(default)s)"
    )
    parser.add_argument(
        "--flush-interval",
        type=float,
        default=0.1,
        metavar="S",
        help="send a partial batch S seconds after its first record came, so a pipe"
        " (tail -f) is published as lines come (default %(default)s)",
    )
    parser.add_argument(
        "--delimiter", default="\\n", help="record separator, escapes allowed (default '\\n')"
    )
    parser.add_argument("--verbose", action="store_true", help="log connections to stderr")
    dead = parser.add_argument_group("re-publishing dead letters")
    dead.add_argument(
        "--from-dead-letter",
        metavar="TOPIC",
        help="re-publish the dead letters of TOPIC to their original topic"
        " (default: publish FILE to --topic)",
    )
    dead.add_argument("--channel", help="the channel of TOPIC to read (default redrive)")
    dead.add_argument(
        "--to",
        metavar="TOPIC",
        help="publish every body to this topic (needed for raw dead letters;"
        " default: each envelope's original topic)",
    )
    dead.add_argument(
        "-n",
        "--count",
        type=int,
        metavar="N",
        help="stop after N dead letters (default 0: until idle)",
    )
    dead.add_argument(
        "--idle-timeout",
        type=float,
        metavar="S",
        help="stop when nothing came for S seconds (default 2)",
    )
    return parser


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
    if not args.flush_interval > 0:
        raise CommandError(f"--flush-interval {args.flush_interval} must be more than 0 s", 2)
    try:
        delimiter = codecs.decode(args.delimiter, "unicode_escape").encode("utf-8")
    except UnicodeDecodeError as exc:
        raise CommandError(f"bad --delimiter {args.delimiter!r}: {exc}", 2) from None
    if not delimiter:
        raise CommandError("--delimiter cannot be empty", 2)
    nsqds, lookupds = topology_addresses(args)
    if args.file == "-":
        fd, total = sys.stdin.fileno(), None
    else:
        try:
            fd = os.open(args.file, os.O_RDONLY)
        except OSError as exc:
            raise CommandError(f"cannot read {args.file}: {exc.strerror or exc}", 2) from None
        total = os.fstat(fd).st_size
    try:
        reach_addresses(nsqds, lookupds)
        reader = RecordReader(fd, delimiter)
        return _publish_all(args, topic, nsqds, lookupds, reader, total)
    finally:
        if args.file != "-":
            os.close(fd)


class _Batches:
    """The MPUB batches sent and their answers: what was published, what was not."""

    def __init__(self, producer: Producer, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self.sent = 0  # batches sent
        self.published = 0  # records nsqd took
        self.failed = 0  # records nsqd did not take
        self.error: BaseException | None = None  # the first failure
        self._pending: collections.deque[tuple[gevent.event.AsyncResult[bytes], int]] = (
            collections.deque()
        )

    def send(self, batch: list[bytes]) -> None:
        """Send ``batch`` as one MPUB; blocks while :data:`_WINDOW` batches await answers."""
        while len(self._pending) >= _WINDOW:
            self._settle_first()
        try:
            result = self.producer.multi_publish_async(self.topic, batch)
        except NSQError as exc:  # refused before sending: a record above nsqd's size limit
            self._failed(len(batch), exc)
            return
        self._pending.append((result, len(batch)))
        self.sent += 1

    def settle(self) -> None:
        """Wait for every answer (each bounded by the producer's timeout)."""
        while self._pending:
            self._settle_first()

    def _settle_first(self) -> None:
        result, size = self._pending[0]
        try:
            result.get()
            self.published += size
        except NSQError as exc:
            self._failed(size, exc)
        self._pending.popleft()

    def _failed(self, size: int, exc: NSQError) -> None:
        self.failed += size
        self.error = self.error or exc


def _publish_all(
    args: Any,
    topic: str,
    nsqds: list[str],
    lookupds: list[str],
    reader: RecordReader,
    total: int | None,
) -> int:
    progress = _Progress(sys.stdout, sys.stdout.isatty(), total)
    stop = gevent.event.Event()
    producer = Producer(nsqds, lookupd_http_addresses=lookupds, timeout=30.0)
    batches = _Batches(producer, topic)
    batch: list[bytes] = []
    with stop_on_signals(stop), producer:
        if not producer.connections:
            where = f"nsqd at {', '.join(nsqds)}" if nsqds else "any nsqd nsqlookupd lists"
            raise CommandError(f"cannot reach {where}: no connection")
        due = 0.0  # when the batch held must go: --flush-interval after its first record
        while not reader.eof and not stop.is_set():
            if batch and time.monotonic() >= due:
                batches.send(batch)
                batch = []
            # Wait for input without limit while nothing is held, else until it is due.
            records = reader.read(stop, max(0.0, due - time.monotonic()) if batch else None)
            for record in records or ():
                if not batch:
                    due = time.monotonic() + args.flush_interval
                batch.append(record)
                if len(batch) >= args.batch:
                    batches.send(batch)
                    batch = []
            progress.update(batches.published, reader.bytes_read)
        if batch:  # read before the end or the Ctrl-C: published too
            batches.send(batch)
        batches.settle()
    progress.update(batches.published, reader.bytes_read, final=True)
    interrupted = stop.is_set() and not reader.eof
    if batches.sent == 0 and not interrupted:
        print("nothing to publish: the input has no records", file=sys.stderr)
    progress.summary(batches.published, batches.sent, topic, interrupted)
    return _report_unpublished(batches, reader.unfinished if interrupted else b"", interrupted)


def _report_unpublished(batches: _Batches, unfinished: bytes, interrupted: bool) -> int:
    """Say on stderr what was read but not published; returns the exit status."""
    if unfinished:
        print(
            f"gnsqlite pub: not published: 1 unfinished record ({len(unfinished):,} bytes"
            " read with no delimiter after them when Ctrl-C came)",
            file=sys.stderr,
        )
    if batches.failed:
        reason = " ".join(str(batches.error).split())
        print(
            f"gnsqlite pub: error: not published: {batches.failed:,}"
            f" record{'s' if batches.failed != 1 else ''} read ({reason})",
            file=sys.stderr,
        )
        return EXIT_ERROR
    return EXIT_INTERRUPTED if interrupted else 0
