"""``gnsqlite broker``: the embedded nsqd, and with ``--lookupd`` an nsqlookupd too.

Every flag of ``python -m gnsqlite.broker`` (nsqd's flags: ``--tcp-address``,
``--http-address``, ``--msg-timeout=60s`` ...) is accepted as is. With
``--lookupd``, an embedded nsqlookupd starts in the same process and the
broker registers with it. Runs until Ctrl-C (SIGINT) or SIGTERM, then stops
cleanly and exits 0.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

import gevent.event

from ..broker import Broker
from ..broker.__main__ import add_nsqd_flags, options_from_namespace
from ..broker.lookupd import Lookupd
from ._common import (
    EXIT_ERROR,
    EXIT_USAGE,
    CommandError,
    Parser,
    normalize_address,
    stop_on_signals,
)

__all__ = ["build_parser", "main"]

log = logging.getLogger(__name__)

_EXAMPLES = """
examples:
  gnsqlite broker                                  # nsqd on 127.0.0.1:4150 (TCP), :4151 (HTTP)
  gnsqlite broker --lookupd                        # and nsqlookupd on :4160 (TCP), :4161 (HTTP)
  gnsqlite broker --tcp-address 127.0.0.1:5150 --http-address 127.0.0.1:5151 \\
      --lookupd-tcp-address 127.0.0.1:4160 --msg-timeout 30s
"""


def build_parser() -> Parser:
    """The parser: this command's flags, then every nsqd flag (one usage, one help)."""
    parser = Parser(
        prog="gnsqlite broker",
        usage="%(prog)s [--lookupd] [nsqd flags]",
        description="Run the embedded nsqd-compatible broker until Ctrl-C.",
        epilog=_EXAMPLES,
    )
    parser.add_argument(
        "--lookupd",
        action="store_true",
        help="also run an embedded nsqlookupd and register the broker with it (default off)",
    )
    parser.add_argument(
        "--lookupd-listen-tcp",
        default="127.0.0.1:4160",
        metavar="ADDR",
        help="with --lookupd: its TCP address (default %(default)s)",
    )
    parser.add_argument(
        "--lookupd-listen-http",
        default="127.0.0.1:4161",
        metavar="ADDR",
        help="with --lookupd: its HTTP address (default %(default)s)",
    )
    add_nsqd_flags(
        parser.add_argument_group(
            "nsqd flags",
            "nsqd's own, also in its one-dash form (-tcp-address); durations are Go's"
            " (60s, 1m0s, 500ms)",
        )
    )
    return parser


def main(argv: Sequence[str]) -> int:
    """Run the broker (and lookupd) until SIGINT/SIGTERM; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(list(argv))  # exits 2 with one line on a bad flag
    options = options_from_namespace(parser, args)
    logging.basicConfig(level=logging.INFO, format="[gnsqlite] %(asctime)s %(message)s")
    try:
        return _run(args.lookupd, args.lookupd_listen_tcp, args.lookupd_listen_http, options)
    except CommandError as exc:
        print(f"gnsqlite broker: error: {exc}", file=sys.stderr)
        return exc.status
    except ValueError as exc:  # a ConfigError from the broker's options
        print(f"gnsqlite broker: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _run(with_lookupd: bool, lookupd_tcp: str, lookupd_http: str, options: dict[str, Any]) -> int:
    lookupd: Lookupd | None = None
    stop = gevent.event.Event()
    with stop_on_signals(stop):
        if with_lookupd:
            lookupd = Lookupd(
                tcp_address=normalize_address(lookupd_tcp, "--lookupd-listen-tcp"),
                http_address=normalize_address(lookupd_http, "--lookupd-listen-http"),
            )
            try:
                lookupd.start()
            except OSError as exc:
                raise CommandError(f"nsqlookupd cannot listen: {exc}") from None
            registered = list(options.get("lookupd_tcp_addresses", []))
            options["lookupd_tcp_addresses"] = [*registered, lookupd.tcp_address]
        broker = Broker(**options)
        try:
            broker.start()
        except OSError as exc:
            if lookupd is not None:
                lookupd.stop()
            print(f"gnsqlite broker: error: nsqd cannot listen: {exc}", file=sys.stderr)
            return EXIT_ERROR
        print(
            f"nsqd: TCP {broker.tcp_address}, HTTP {broker.http_address}"
            + (
                f"; nsqlookupd: TCP {lookupd.tcp_address}, HTTP {lookupd.http_address}"
                if lookupd is not None
                else ""
            )
            + "; Ctrl-C stops",
            flush=True,
        )
        try:
            stop.wait()
        finally:
            broker.stop()
            if lookupd is not None:
                lookupd.stop()
    return 0
