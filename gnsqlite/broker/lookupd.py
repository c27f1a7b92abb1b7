"""An nsqlookupd-compatible discovery server on gevent, for tests and demos.

It speaks both of nsqlookupd's interfaces, as v1.x does:

* **TCP** (port 4160), where nsqd announces itself: the magic ``"  V1"``, then
  newline-terminated commands ``IDENTIFY`` (followed by a 4-byte big-endian
  size and a JSON body), ``REGISTER topic [channel]``,
  ``UNREGISTER topic [channel]`` and ``PING``. Every answer is
  ``[4-byte size][data]``: ``OK``, the IDENTIFY JSON, or an error text such as
  ``E_INVALID invalid command FOO``, after which the connection is closed.
  When a producer's connection closes, all its registrations vanish.
* **HTTP** (port 4161): ``/ping``, ``/info``, ``/lookup``, ``/topics``,
  ``/channels``, ``/nodes`` and the POST actions ``/topic/create``,
  ``/topic/delete``, ``/channel/create``, ``/channel/delete`` and
  ``/topic/tombstone``, answering the v1.x JSON bodies (errors are
  ``{"message": "TOPIC_NOT_FOUND"}`` with the matching status).

The registration database is :mod:`.lookupd_db`; the TCP protocol is
:mod:`.lookupd_tcp` and the HTTP API :mod:`.lookupd_http`, both above it. This
module opens the listeners and wires them together.

:class:`Lookupd` opens no socket and starts no greenlet until :meth:`Lookupd.start`;
:meth:`Lookupd.stop` closes every connection and kills every greenlet it made.
``python -m gnsqlite.broker.lookupd`` runs one until SIGINT or SIGTERM, with
nsqlookupd's flag names.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket as _stdlib_socket
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import gevent
import gevent.event
import gevent.pool
import gevent.pywsgi
import gevent.server

from ..net import format_address, parse_address
from ..protocol import defaults
from .lookupd_db import PeerInfo, Registration, RegistrationDB
from .lookupd_http import LookupdHttp
from .lookupd_tcp import LookupdTcp
from .options import format_duration, parse_duration
from .wsgi_log import PlainLogHandler

__all__ = [
    "VERSION",
    "Lookupd",
    "PeerInfo",
    "Registration",
    "RegistrationDB",
    "main",
]

log = logging.getLogger(__name__)

#: The nsqlookupd version this server reports (the same as the embedded nsqd's).
VERSION = "1.3.0"

_STOP_TIMEOUT = 1.0


class Lookupd:
    """An nsqlookupd: TCP for nsqd registrations, HTTP for discovery.

    Addresses are ``"host:port"``; port 0 picks a free port, and after
    :meth:`start` :attr:`tcp_address` and :attr:`http_address` hold the bound
    addresses. ``broadcast_address`` defaults to the hostname, like
    nsqlookupd's. ``inactive_producer_timeout`` (seconds, nsqlookupd's default
    300) hides producers that have not pinged for that long; ``tombstone_lifetime``
    (seconds, its default 45) is how long ``/topic/tombstone`` hides a producer.
    ``clock`` returns seconds (``time.monotonic``); tests may replace it.
    """

    def __init__(
        self,
        tcp_address: str = "127.0.0.1:4160",
        http_address: str = "127.0.0.1:4161",
        broadcast_address: str | None = None,
        inactive_producer_timeout: float = defaults.INACTIVE_PRODUCER_TIMEOUT,
        tombstone_lifetime: float = defaults.TOMBSTONE_LIFETIME,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        parse_address(tcp_address)
        parse_address(http_address)
        self.tcp_address = tcp_address
        self.http_address = http_address
        self.hostname = _stdlib_socket.gethostname()
        self.broadcast_address = broadcast_address or self.hostname
        self.inactive_producer_timeout = inactive_producer_timeout
        self.tombstone_lifetime = tombstone_lifetime
        self.version = VERSION
        self.db = RegistrationDB()
        self._tcp = LookupdTcp(self.db, self, clock)
        self._http = LookupdHttp(self.db, self, clock)
        self._tcp_server: gevent.server.StreamServer | None = None
        self._http_server: gevent.pywsgi.WSGIServer | None = None
        self._tcp_pool = gevent.pool.Pool()

    def __repr__(self) -> str:
        return f"<Lookupd tcp={self.tcp_address} http={self.http_address}>"

    @property
    def tcp_port(self) -> int:
        """The TCP port (the bound one after :meth:`start`)."""
        return parse_address(self.tcp_address)[1]

    @property
    def http_port(self) -> int:
        """The HTTP port (the bound one after :meth:`start`)."""
        return parse_address(self.http_address)[1]

    @property
    def started(self) -> bool:
        """Whether the server is listening."""
        return self._tcp_server is not None

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Bind both listeners and start serving; does not block.

        Raises ``OSError`` when an address cannot be bound (nothing is left open).
        """
        if self._tcp_server is not None:
            return
        tcp = gevent.server.StreamServer(
            parse_address(self.tcp_address), self._tcp.handle, spawn=self._tcp_pool
        )
        http = gevent.pywsgi.WSGIServer(
            parse_address(self.http_address),
            self._http,
            log=None,
            error_log=log,
            handler_class=PlainLogHandler,
        )
        tcp.start()
        try:
            http.start()
        except BaseException:
            tcp.stop(timeout=0)
            raise
        self._tcp_server, self._http_server = tcp, http
        tcp_bound: Any = tcp.address
        http_bound: Any = http.address
        self.tcp_address = format_address((str(tcp_bound[0]), int(tcp_bound[1])))
        self.http_address = format_address((str(http_bound[0]), int(http_bound[1])))
        log.info("nsqlookupd listening: TCP %s, HTTP %s", self.tcp_address, self.http_address)

    def stop(self) -> None:
        """Close every connection and listener; blocks up to about a second."""
        tcp, http = self._tcp_server, self._http_server
        self._tcp_server = self._http_server = None
        if tcp is None or http is None:
            return
        tcp.close()
        self._tcp.close_connections()
        tcp.stop(timeout=_STOP_TIMEOUT)
        http.stop(timeout=_STOP_TIMEOUT)
        log.info("nsqlookupd stopped")

    def __enter__(self) -> Lookupd:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


def _normalize_flags(argv: Sequence[str]) -> list[str]:
    """Accept Go's single-dash long flags (``-tcp-address``) as well."""
    out = []
    for arg in argv:
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 2:
            arg = "-" + arg
        out.append(arg)
    return out


def _arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gnsqlite.broker.lookupd",
        description="An nsqlookupd-compatible server (gnsqlite).",
    )
    parser.add_argument(
        "--tcp-address", default="0.0.0.0:4160", help="<addr>:<port> to listen on for TCP clients"
    )
    parser.add_argument(
        "--http-address", default="0.0.0.0:4161", help="<addr>:<port> to listen on for HTTP clients"
    )
    parser.add_argument(
        "--broadcast-address",
        default=None,
        help="address of this lookupd node (defaults to the OS hostname)",
    )
    parser.add_argument(
        "--inactive-producer-timeout",
        type=parse_duration,
        default=defaults.INACTIVE_PRODUCER_TIMEOUT,
        help="how long a producer stays active since its last ping"
        f" ({format_duration(defaults.INACTIVE_PRODUCER_TIMEOUT)})",
    )
    parser.add_argument(
        "--tombstone-lifetime",
        type=parse_duration,
        default=defaults.TOMBSTONE_LIFETIME,
        help="how long a producer stays tombstoned"
        f" ({format_duration(defaults.TOMBSTONE_LIFETIME)})",
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warn", "error", "fatal"]
    )
    parser.add_argument("--log-prefix", default="[nsqlookupd] ")
    # nsqlookupd v1.3.0: "[deprecated] has no effect, use --log-level"
    parser.add_argument("--verbose", nargs="?", const=True, help=argparse.SUPPRESS)
    parser.add_argument("--version", action="store_true", help="print version string")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run a lookupd until SIGINT or SIGTERM; returns the exit status."""
    args = _arg_parser().parse_args(_normalize_flags(sys.argv[1:] if argv is None else argv))
    if args.version:
        print(f"nsqlookupd v{VERSION} (gnsqlite)")
        return 0
    level = {"warn": "WARNING", "fatal": "CRITICAL"}.get(args.log_level, args.log_level.upper())
    logging.basicConfig(level=level, format=f"{args.log_prefix}%(asctime)s %(message)s")
    server = Lookupd(
        tcp_address=args.tcp_address,
        http_address=args.http_address,
        broadcast_address=args.broadcast_address,
        inactive_producer_timeout=args.inactive_producer_timeout,
        tombstone_lifetime=args.tombstone_lifetime,
    )
    stopping = gevent.event.Event()
    handlers = [gevent.signal_handler(sig, stopping.set) for sig in (signal.SIGINT, signal.SIGTERM)]
    try:
        server.start()
    except OSError as exc:
        print(f"FATAL: cannot listen: {exc}", file=sys.stderr)
        return 1
    try:
        stopping.wait()
    finally:
        server.stop()
        for handler in handlers:
            handler.cancel()
    return 0


if __name__ == "__main__":
    sys.exit(main())
