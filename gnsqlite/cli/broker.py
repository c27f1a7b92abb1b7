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

import gevent.event

from ..broker import Broker
from ..broker.__main__ import build_parser as nsqd_parser
from ..broker.__main__ import options_from_args
from ..broker.lookupd import Lookupd
from ._common import EXIT_ERROR, CommandError, Parser, normalize_address, stop_on_signals

__all__ = ["build_parser", "main"]

log = logging.getLogger(__name__)

_EXAMPLES = """
examples:
  gnsqlite broker                                  # nsqd on 127.0.0.1:4150 (TCP), :4151 (HTTP)
  gnsqlite broker --lookupd                        # and nsqlookupd on :4160 (TCP), :4161 (HTTP)
  gnsqlite broker --tcp-address 127.0.0.1:5150 --http-address 127.0.0.1:5151 \\
      --lookupd-tcp-address 127.0.0.1:4160 --msg-timeout 30s

Every nsqd flag of 'python -m gnsqlite.broker' is accepted (listed below).
"""


def build_parser() -> Parser:
    """The parser of the flags this command adds to nsqd's."""
    parser = Parser(
        prog="gnsqlite broker",
        description="Run the embedded nsqd-compatible broker until Ctrl-C.",
        epilog=_EXAMPLES,
        add_help=False,
    )
    parser.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    parser.add_argument(
        "--lookupd",
        action="store_true",
        help="also run an embedded nsqlookupd and register the broker with it",
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
    return parser


def main(argv: Sequence[str]) -> int:
    """Run the broker (and lookupd) until SIGINT/SIGTERM; returns the exit status."""
    parser = build_parser()
    # nsqd's Go-style single-dash long flags (-tcp-address) become --tcp-address
    argv = ["-" + a if a.startswith("-") and not a.startswith("--") and len(a) > 2 else a
            for a in argv]  # fmt: skip
    args, rest = parser.parse_known_args(list(argv))
    if args.help:
        parser.print_help()
        print()
        print(nsqd_parser().format_help().replace("python -m gnsqlite.broker", "gnsqlite broker"))
        return 0
    logging.basicConfig(level=logging.INFO, format="[gnsqlite] %(asctime)s %(message)s")
    try:
        return _run(args.lookupd, args.lookupd_listen_tcp, args.lookupd_listen_http, rest)
    except CommandError as exc:
        print(f"gnsqlite broker: error: {exc}", file=sys.stderr)
        return exc.status
    except ValueError as exc:  # a ConfigError from the broker's options
        print(f"gnsqlite broker: error: {exc}", file=sys.stderr)
        return 2


def _run(with_lookupd: bool, lookupd_tcp: str, lookupd_http: str, nsqd_argv: list[str]) -> int:
    options = options_from_args(nsqd_argv)  # exits 2 with argparse's message on a bad flag
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
            + (f"; nsqlookupd: TCP {lookupd.tcp_address}, HTTP {lookupd.http_address}"
               if lookupd is not None else "")
            + "; Ctrl-C stops",
            flush=True,
        )  # fmt: skip
        try:
            stop.wait()
        finally:
            broker.stop()
            if lookupd is not None:
                lookupd.stop()
    return 0
