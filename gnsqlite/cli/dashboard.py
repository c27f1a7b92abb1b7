"""``gnsqlite dashboard``: the live dashboard of a running cluster, over nsqd's HTTP API.

It polls ``/stats`` of each nsqd given (or registered with each nsqlookupd
given) and serves the page until Ctrl-C. To watch Consumers and Producers
of your own process, use :class:`gnsqlite.dashboard.Dashboard` in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gevent.event

from ..http import LookupdClient, NsqdHTTPClient
from ._common import (
    CommandError,
    Parser,
    check_http,
    configure_logging,
    normalize_address,
    run,
    stop_on_signals,
)

__all__ = ["build_parser", "main"]

_EXAMPLES = """
examples:
  gnsqlite dashboard --lookupd-http-address 127.0.0.1:4161
  gnsqlite dashboard --nsqd-http-address 127.0.0.1:4151 --port 9000
  gnsqlite dashboard --nsqd-http-address 10.0.0.5:4151 --host 0.0.0.0   # reachable by others

The page is read-only and binds 127.0.0.1 unless --host says otherwise.
Needs the extra: pip install 'gnsqlite[dashboard]'.
"""


def build_parser() -> Parser:
    """The ``dashboard`` argument parser."""
    parser = Parser(
        prog="gnsqlite dashboard",
        description="Serve the live dashboard of an nsqd cluster until Ctrl-C.",
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
        help="nsqlookupd HTTP address host:port (repeatable): watches every nsqd"
        " registered (this or --nsqd-http-address is required)",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to serve on (default %(default)s)"
    )
    parser.add_argument(
        "--port", type=int, default=8080, help="port, 0: any free one (default %(default)s)"
    )
    parser.add_argument(
        "--interval", type=float, default=1.0, help="seconds between polls (default %(default)g)"
    )
    parser.add_argument("--verbose", action="store_true", help="log what the library does")
    return parser


def main(argv: Sequence[str]) -> int:
    """Run ``gnsqlite dashboard`` until Ctrl-C; returns the exit status."""
    args = build_parser().parse_args(list(argv))
    args.prog = "gnsqlite dashboard"
    return run(_dashboard, args)


def _dashboard(args: Any) -> int:
    configure_logging(args.verbose)
    if not args.nsqd_http_address and not args.lookupd_http_address:
        raise CommandError("give --nsqd-http-address or --lookupd-http-address", 2)
    if not args.interval > 0:
        raise CommandError("--interval must be more than 0 seconds", 2)
    nsqds = [normalize_address(a, "nsqd HTTP") for a in args.nsqd_http_address]
    lookupds = [normalize_address(a, "nsqlookupd HTTP") for a in args.lookupd_http_address]
    for address in nsqds:
        check_http(NsqdHTTPClient(address, 5.0))
    for address in lookupds:
        check_http(LookupdClient(address, 5.0))
    try:
        from ..dashboard import Dashboard

        dashboard = Dashboard(
            nsqd_http_addresses=nsqds, lookupd_http_addresses=lookupds, interval=args.interval
        )
        dashboard.start((args.host, args.port))
    except ImportError as exc:
        raise CommandError(str(exc)) from None
    except OSError as exc:
        raise CommandError(f"cannot listen on {args.host}:{args.port}: {exc}") from None
    stop = gevent.event.Event()
    with stop_on_signals(stop):
        print(f"dashboard: {dashboard.url} (Ctrl-C stops)", flush=True)
        try:
            stop.wait()
        finally:
            dashboard.stop()
    return 0
