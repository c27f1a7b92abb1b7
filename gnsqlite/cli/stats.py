"""``gnsqlite stats``: a readable table of an nsqd's (or a cluster's) topics and channels.

With ``--lookupd-http-address`` every nsqd registered with lookupd is asked
and the figures are summed per topic and channel, like nsqadmin's totals.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import gevent

from ..errors import NSQError
from ..http import LookupdClient, NsqdHTTPClient
from ..protocol import check_topic_name
from ._common import CommandError, Parser, check_http, normalize_address, one_line, run

__all__ = ["build_parser", "collect", "format_table", "main", "nsqd_http_addresses"]

_EXAMPLES = """
examples:
  gnsqlite stats --nsqd-http-address 127.0.0.1:4151
  gnsqlite stats --lookupd-http-address 127.0.0.1:4161 --topic clicks
  gnsqlite stats --nsqd-http-address 127.0.0.1:4151 --json

Columns: DEPTH (queued in memory and on disk), IN-FLIGHT (sent, not yet
answered), DEFERRED, REQUEUED, TIMED-OUT and MESSAGES (counted since nsqd
started), CLIENTS (connected consumers). A topic row shows its own depth and
message count; its channels follow, indented.
"""

_COLUMNS = ("DEPTH", "IN-FLIGHT", "DEFERRED", "REQUEUED", "TIMED-OUT", "MESSAGES", "CLIENTS")
_CHANNEL_KEYS = (
    "depth",
    "in_flight_count",
    "deferred_count",
    "requeue_count",
    "timeout_count",
    "message_count",
    "client_count",
)


def build_parser() -> Parser:
    """The ``stats`` argument parser."""
    parser = Parser(
        prog="gnsqlite stats",
        description="Print a table of topics and channels with their counters.",
        epilog=_EXAMPLES,
    )
    parser.add_argument(
        "--nsqd-http-address",
        action="append",
        default=[],
        metavar="ADDR",
        help="nsqd HTTP address host:port (repeatable; this or --lookupd-http-address is required)",
    )
    parser.add_argument(
        "--lookupd-http-address",
        action="append",
        default=[],
        metavar="ADDR",
        help="nsqlookupd HTTP address host:port (repeatable): every registered nsqd is"
        " asked (this or --nsqd-http-address is required)",
    )
    parser.add_argument("--topic", help="only this topic (default: every topic)")
    parser.add_argument("--json", action="store_true", help="print the merged figures as JSON")
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="seconds per HTTP request (default %(default)g)"
    )
    return parser


def nsqd_http_addresses(lookupds: Iterable[str], timeout: float) -> list[str]:
    """The HTTP addresses of every nsqd registered with ``lookupds``; blocks on HTTP."""
    found: dict[str, None] = {}
    for address in lookupds:
        for node in LookupdClient(address, timeout).nodes():
            found[f"{node['broadcast_address']}:{node['http_port']}"] = None
    return list(found)


def collect(nsqds: Sequence[str], topic: str | None, timeout: float) -> list[dict[str, Any]]:
    """Merged topics ``[{"topic", "depth", "message_count", "channels": [...]}]``.

    Asks every nsqd at once; blocks up to about ``timeout`` seconds. Raises
    the first error (an :class:`~gnsqlite.errors.NSQError`).
    """
    jobs = [gevent.spawn(_stats_of, a, topic, timeout) for a in nsqds]
    gevent.joinall(jobs)
    topics: dict[str, dict[str, Any]] = {}
    for job in jobs:
        document = job.get()
        if isinstance(document, NSQError):
            raise document
        for t in document.get("topics") or []:
            merged = topics.setdefault(
                t["topic_name"],
                {"topic": t["topic_name"], "depth": 0, "message_count": 0, "channels": {}},
            )
            merged["depth"] += int(t.get("depth", 0))
            merged["message_count"] += int(t.get("message_count", 0))
            for c in t.get("channels") or []:
                name = c["channel_name"]
                channel = merged["channels"].setdefault(
                    name, {"channel": name, **dict.fromkeys(_CHANNEL_KEYS, 0)}
                )
                for key in _CHANNEL_KEYS:
                    if key == "client_count" and key not in c:
                        channel[key] += len(c.get("clients") or [])
                    else:
                        channel[key] += int(c.get(key, 0))
    out = []
    for name in sorted(topics):
        t = topics[name]
        t["channels"] = [t["channels"][c] for c in sorted(t["channels"])]
        out.append(t)
    return out


def _stats_of(address: str, topic: str | None, timeout: float) -> dict[str, Any] | NSQError:
    """One nsqd's ``/stats``, or the error (returned: a failed greenlet would print it)."""
    try:
        return NsqdHTTPClient(address, timeout).stats(topic)
    except NSQError as exc:
        return exc


def format_table(topics: list[dict[str, Any]]) -> str:
    """The text table of :func:`collect`'s result."""
    rows: list[tuple[str, ...]] = [("TOPIC / CHANNEL", *_COLUMNS)]
    for t in topics:
        rows.append((t["topic"], f"{t['depth']:,}", "", "", "", "", f"{t['message_count']:,}", ""))
        for c in t["channels"]:
            rows.append((f"  {c['channel']}", *(f"{c[k]:,}" for k in _CHANNEL_KEYS)))
    if len(rows) == 1:
        return "no topics\n"
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    """Run ``gnsqlite stats``; blocks on HTTP up to ``--timeout`` seconds per request."""
    args = build_parser().parse_args(list(argv))
    args.prog = "gnsqlite stats"
    return run(_stats, args)


def _stats(args: Any) -> int:
    if not args.nsqd_http_address and not args.lookupd_http_address:
        raise CommandError("give --nsqd-http-address or --lookupd-http-address", 2)
    if not args.timeout > 0:
        raise CommandError("--timeout must be more than 0 seconds", 2)
    if args.topic is not None:
        check_topic_name(args.topic)
    nsqds = [normalize_address(a, "nsqd HTTP") for a in args.nsqd_http_address]
    lookupds = [normalize_address(a, "nsqlookupd HTTP") for a in args.lookupd_http_address]
    for address in nsqds:
        check_http(NsqdHTTPClient(address, args.timeout))
    for address in lookupds:
        check_http(LookupdClient(address, args.timeout))
    try:
        if lookupds:
            nsqds += nsqd_http_addresses(lookupds, args.timeout)
        topics = collect(list(dict.fromkeys(nsqds)), args.topic, args.timeout)
    except NSQError as exc:
        raise CommandError(one_line(exc)) from None
    if args.json:
        json.dump(topics, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        if lookupds:
            print(f"{len(nsqds)} nsqd registered with {', '.join(lookupds)}")
        sys.stdout.write(format_table(topics))
    return 0
