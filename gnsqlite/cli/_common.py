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
from ..errors import NSQError
from ..net import parse_address
from ..tcp import connect_tcp

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "CommandError",
    "Parser",
    "check_reachable",
    "configure_logging",
    "normalize_address",
    "run",
    "stop_on_signals",
]

log = logging.getLogger(__name__)

#: Exit status for a failure at run time (unreachable server, refused publish).
EXIT_ERROR = 1
#: Exit status for bad input (flags, names, addresses), like argparse's.
EXIT_USAGE = 2
#: Exit status when Ctrl-C (SIGINT) cut a job with an end short (128 + SIGINT).
EXIT_INTERRUPTED = 130


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
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="gnsqlite: %(levelname)s: %(message)s",
        stream=sys.stderr,
    )


def normalize_address(address: str, what: str) -> str:
    """``"host:port"`` in canonical form; :class:`CommandError` (usage) when malformed."""
    try:
        return net.normalize_address(address)
    except (ValueError, TypeError) as exc:
        raise CommandError(f"bad {what} address {address!r}: {exc}", EXIT_USAGE) from None


def check_reachable(address: str, what: str, timeout: float = 5.0) -> None:
    """Open and close a TCP connection to ``address``; blocks up to ``timeout`` seconds.

    Raises :class:`CommandError` naming the server when nothing answers, so a
    command fails at once instead of retrying in the background forever.
    """
    host, port = parse_address(address)
    try:
        sock = connect_tcp((host, port), timeout)
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise CommandError(f"cannot reach {what} at {address}: {reason}") from None
    sock.close()


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
    """Run a subcommand; errors become one line on stderr and an exit status."""
    prog = getattr(args, "prog", "gnsqlite")
    try:
        return command(args)
    except CommandError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.status
    except ValueError as exc:  # ConfigError, InvalidNameError: bad input
        print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except (NSQError, OSError) as exc:
        print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
