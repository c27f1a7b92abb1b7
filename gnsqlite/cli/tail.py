"""``gnsqlite tail``: print a topic's messages as they arrive, like ``nsq_tail``.

It subscribes on an ephemeral channel (``tail123456#ephemeral``) unless
``--channel`` names one, finishes every message once printed, and stops
after ``-n`` messages or on Ctrl-C, closing the consumer cleanly: exit 0,
or 130 when Ctrl-C came before the ``-n`` messages (docs/cli.md's rule).
With ``--dead-letter`` each message is read as a dead-letter envelope (see
:mod:`gnsqlite.deadletter`) and printed with where it came from, its
attempts and its last error.
"""

from __future__ import annotations

import base64
import json
import random
import sys
from collections.abc import Sequence
from typing import Any, BinaryIO

import gevent
import gevent.event

from ..consumer import Consumer
from ..deadletter import DeadLetter, decode_envelope
from ..errors import EnvelopeError
from ..message import Message, RequeueMessage
from ..protocol import check_channel_name, check_topic_name
from ._common import (
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

__all__ = ["build_parser", "format_dead_letter", "format_message", "main"]

_EXAMPLES = """
examples:
  gnsqlite tail --topic clicks --nsqd-tcp-address 127.0.0.1:4150
  gnsqlite tail --topic clicks --lookupd-http-address 127.0.0.1:4161 -n 10 --format json
  gnsqlite tail --topic clicks --channel archive --nsqd-tcp-address 127.0.0.1:4150
  gnsqlite tail --topic orders.dead --dead-letter --nsqd-tcp-address 127.0.0.1:4150

Raw output writes each body followed by a newline; json writes one object a
line: {"id", "timestamp" (ns), "attempts", "nsqd", "body"} ("body_base64"
instead of "body" when the body is not UTF-8).

With --dead-letter, raw output writes one line a dead letter:
  orders/billing id=0a1b2c3d4e5f6789 attempts=6 error="ValueError: boom" <body>
and json the envelope's fields: {"topic", "channel", "id", "attempts",
"timestamp" (ns), "nsqd", "dead_lettered_at" (ns), "error" ({"type",
"message"} or null), "body" or "body_base64"}. A message that is not an
envelope is printed as without --dead-letter, with a warning on stderr.
An ephemeral channel sees only what is published while it exists, and on a
topic with no other channel it takes the messages away: give a dead-letter
topic its own durable channel (e.g. the one `gnsqlite pub --from-dead-letter`
reads).
"""


def build_parser() -> Parser:
    """The ``tail`` argument parser."""
    parser = Parser(
        prog="gnsqlite tail",
        description="Print the messages of a topic as they arrive.",
        epilog=_EXAMPLES,
    )
    parser.add_argument("--topic", required=True, help="the topic to read (required)")
    parser.add_argument(
        "--channel", help="the channel (default: a new ephemeral one, so nothing is taken away)"
    )
    add_address_arguments(parser)
    parser.add_argument(
        "-n",
        "--count",
        type=int,
        default=0,
        metavar="N",
        help="exit after N messages (default 0: run until Ctrl-C)",
    )
    parser.add_argument(
        "--format",
        choices=("raw", "json"),
        default="raw",
        help="output format: raw or json (default %(default)s)",
    )
    parser.add_argument(
        "--dead-letter",
        action="store_true",
        help="decode dead-letter envelopes: original topic, attempts, error, body",
    )
    parser.add_argument(
        "--max-in-flight", type=int, default=200, help="RDY budget (default %(default)s)"
    )
    parser.add_argument("--verbose", action="store_true", help="log connections to stderr")
    return parser


def format_message(message: Message, fmt: str) -> bytes:
    """One output line (newline included) for ``message`` in ``fmt`` (``raw`` or ``json``)."""
    if fmt == "raw":
        return message.body + b"\n"
    record: dict[str, Any] = {
        "id": message.id,
        "timestamp": message.timestamp,
        "attempts": message.attempts,
        "nsqd": message.nsqd,
    }
    return _json_line(record, message.body)


def _json_line(record: dict[str, Any], body: bytes) -> bytes:
    """``record`` with ``body`` (``body_base64`` when not UTF-8) as one JSON line."""
    try:
        record["body"] = body.decode("utf-8")
    except UnicodeDecodeError:
        record["body_base64"] = base64.b64encode(body).decode("ascii")
    return json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n"


def format_dead_letter(letter: DeadLetter, fmt: str) -> bytes:
    """One output line (newline included) for a decoded dead letter in ``fmt``."""
    error = letter.error
    if fmt == "raw":
        said = "none" if error is None else json.dumps(f"{error.type}: {error.message}")
        head = (
            f"{letter.topic}/{letter.channel} id={letter.id} attempts={letter.attempts}"
            f" error={said} "
        )
        return head.encode("utf-8") + letter.body + b"\n"
    record = letter.to_json()
    del record["format"], record["body"]
    return _json_line(record, letter.body)


def _format(message: Message, fmt: str, dead_letter: bool) -> bytes:
    if not dead_letter:
        return format_message(message, fmt)
    try:
        letter = decode_envelope(message.body)
    except EnvelopeError as exc:
        print(f"gnsqlite tail: message {message.id}: {exc}; printed as is", file=sys.stderr)
        return format_message(message, fmt)
    return format_dead_letter(letter, fmt)


def main(argv: Sequence[str]) -> int:
    """Run ``gnsqlite tail``; blocks until ``-n`` messages or Ctrl-C."""
    args = build_parser().parse_args(list(argv))
    args.prog = "gnsqlite tail"
    return run(_tail, args)


def _tail(args: Any) -> int:
    configure_logging(args.verbose)
    topic = check_topic_name(args.topic)
    channel = args.channel or f"tail{random.randrange(1_000_000):06d}#ephemeral"
    check_channel_name(channel)
    if args.count < 0:
        raise CommandError("-n must be 0 (no limit) or more", 2)
    nsqds, lookupds = topology_addresses(args)
    reach_addresses(nsqds, lookupds)

    out: BinaryIO = sys.stdout.buffer
    stop = gevent.event.Event()  # -n reached, or the reader went away
    interrupted = gevent.event.Event()  # Ctrl-C, SIGTERM
    printed = 0

    def handle(message: Message) -> None:
        nonlocal printed
        if stop.is_set() or interrupted.is_set():
            raise RequeueMessage(0.0)  # not printed: back to the channel, without backoff
        try:
            out.write(_format(message, args.format, args.dead_letter))
            out.flush()
        except BrokenPipeError:  # the reader went away (`gnsqlite tail ... | head`)
            stop.set()
            return
        printed += 1
        if args.count and printed >= args.count:
            stop.set()

    consumer = Consumer(
        topic,
        channel,
        handle,
        nsqd_tcp_addresses=nsqds,
        lookupd_http_addresses=lookupds,
        max_in_flight=1 if args.count == 1 else args.max_in_flight,
        concurrency=1,  # keeps the output in arrival order
        backoff=None,
    )
    with stop_on_signals(interrupted):
        consumer.start()
        try:
            gevent.wait([stop, interrupted], count=1)
        finally:
            consumer.close(timeout=5.0)
    if args.count and printed < args.count and interrupted.is_set():
        return EXIT_INTERRUPTED  # a job with an end, cut short
    return 0
