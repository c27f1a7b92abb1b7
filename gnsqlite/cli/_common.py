"""What every subcommand shares: argument parsing, errors, Ctrl-C, reachability.

A subcommand fails with :class:`CommandError` (a one-line message and an
exit status); :func:`run` turns it, and the library's own errors, into that
one line on stderr instead of a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

import gevent
import gevent.event

from .. import net
from ..config import ConnectionConfig
from ..connection import Connection
from ..errors import NSQError
from ..http import LookupdClient, NsqdHTTPClient
from .wording import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    error_line,
    exit_status,
    log_on_one_line,
    one_line,
    unreachable,
)

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "CommandError",
    "Parser",
    "add_address_arguments",
    "check_http",
    "check_nsqd_tcp",
    "configure_logging",
    "normalize_address",
    "one_line",
    "reach_addresses",
    "reach_error",
    "run",
    "stop_on_signals",
    "topology_addresses",
]

log = logging.getLogger(__name__)


class CommandError(Exception):
    """A subcommand failed; ``str(error)`` is the one line printed, ``status`` the exit code."""

    def __init__(self, message: str, status: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.status = status


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line: ``prog: error: ... (see --help)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """Print one line and exit with status 2."""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def configure_logging(verbose: bool = False) -> None:
    """Library warnings as ``gnsqlite: ...`` lines on stderr (INFO too when ``verbose``)."""
    log_on_one_line("gnsqlite", logging.INFO if verbose else logging.WARNING)


def normalize_address(address: str, what: str) -> str:
    """``"host:port"`` in canonical form; :class:`CommandError` (usage) when malformed."""
    try:
        return net.normalize_address(address)
    except (ValueError, TypeError) as exc:
        raise CommandError(f"bad {what} address {address!r}: {exc}", EXIT_USAGE) from None


def add_address_arguments(parser: argparse.ArgumentParser, nsqd_note: str = "") -> None:
    """Add ``--nsqd-tcp-address`` and ``--lookupd-http-address``, both repeatable.

    ``nsqd_note`` is added to the nsqd flag's help (``"batches are spread"``).
    :func:`topology_addresses` reads them.
    """
    note = f"{nsqd_note}; " if nsqd_note else ""
    parser.add_argument(
        "--nsqd-tcp-address",
        action="append",
        default=[],
        metavar="ADDR",
        help=f"nsqd TCP address host:port (repeatable; {note}this or --lookupd-http-address"
        " is required)",
    )
    parser.add_argument(
        "--lookupd-http-address",
        action="append",
        default=[],
        metavar="ADDR",
        help="nsqlookupd HTTP address host:port (repeatable; this or --nsqd-tcp-address"
        " is required)",
    )


def topology_addresses(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The nsqd TCP and nsqlookupd HTTP addresses of ``args``, normalised; opens nothing.

    One kind must be given (either repeated): else, or for a malformed
    address, :class:`CommandError` with the usage status.
    """
    if bool(args.nsqd_tcp_address) == bool(args.lookupd_http_address):
        raise CommandError(
            "give --nsqd-tcp-address or --lookupd-http-address (one kind, repeatable)", EXIT_USAGE
        )
    nsqds = [normalize_address(a, "nsqd TCP") for a in args.nsqd_tcp_address]
    lookupds = [normalize_address(a, "nsqlookupd HTTP") for a in args.lookupd_http_address]
    return nsqds, lookupds


def reach_addresses(nsqds: Sequence[str], lookupds: Sequence[str]) -> None:
    """Check that each nsqd TCP port and nsqlookupd HTTP API answers; blocks up to 5 s each.

    Raises :class:`CommandError` in :func:`reach_error`'s words for the first that does not.
    """
    for address in nsqds:
        check_nsqd_tcp(address)
    for address in lookupds:
        check_http(LookupdClient(address, timeout=5.0))


def check_nsqd_tcp(address: str, timeout: float = 5.0) -> None:
    """Connect to nsqd's TCP port at ``address`` and IDENTIFY, then close; blocks.

    Takes up to ``timeout`` seconds. Raises :class:`CommandError` when
    nothing answers, or when something other than nsqd's TCP port does (its
    HTTP port, nsqlookupd's): an error retrying cannot heal, said at once.
    """
    conn = Connection(address, ConnectionConfig(connect_timeout=timeout))
    try:
        conn.connect()
    except NSQError as exc:
        raise reach_error("nsqd", address, exc) from None
    finally:
        conn.close(0)


def check_http(client: NsqdHTTPClient | LookupdClient) -> None:
    """Ping an nsqd or nsqlookupd HTTP API; blocks up to the client's timeout.

    Raises :class:`CommandError` in :func:`reach_error`'s words when it fails.
    """
    what = "nsqlookupd" if isinstance(client, LookupdClient) else "nsqd"
    try:
        client.ping()
    except NSQError as exc:
        raise reach_error(what, client.address, exc) from None


def reach_error(what: str, address: str, exc: BaseException) -> CommandError:
    """:func:`~gnsqlite.cli.wording.unreachable`'s words as a :class:`CommandError` (status 1)."""
    return CommandError(unreachable(what, address, exc))


@contextlib.contextmanager
def stop_on_signals(
    stop: gevent.event.Event, signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM)
) -> Iterator[gevent.event.Event]:
    """Set ``stop`` on SIGINT/SIGTERM while the block runs (the hub handles the signal)."""
    handlers = [gevent.signal_handler(sig, stop.set) for sig in signals]
    try:
        yield stop
    finally:
        for handler in handlers:
            handler.cancel()


def run(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a subcommand; errors become one line on stderr and an exit status (docs/cli.md)."""
    prog = getattr(args, "prog", "gnsqlite")
    try:
        return command(args)
    except CommandError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.status
    except (NSQError, ValueError, OSError) as exc:  # ValueError: ConfigError ..., bad input
        print(error_line(prog, exc), file=sys.stderr)
        return exit_status(exc)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
