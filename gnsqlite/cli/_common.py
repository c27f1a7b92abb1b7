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
from ..conn import Connection
from ..errors import NSQError, WrongPortError
from ..http import LookupdClient, NsqdHTTPClient

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "CommandError",
    "Parser",
    "check_http",
    "check_nsqd_tcp",
    "configure_logging",
    "normalize_address",
    "one_line",
    "reach_error",
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
    """The one wording of "this server cannot be used", for every command and example.

    ``cannot reach nsqd at 127.0.0.1:4150: Connection refused`` when nothing
    answers (the system's reason, the address once); ``wrong port for nsqd at
    127.0.0.1:4151: it answered in HTTP ...; give nsqd's TCP port (usually 4150)``
    when another protocol answers.
    """
    if isinstance(exc, WrongPortError):
        said = one_line(exc).removeprefix(f"{address}: ")
        return CommandError(f"wrong port for {what} at {address}: {said}")
    return CommandError(f"cannot reach {what} at {address}: {_reason(exc, address)}")


def _reason(exc: BaseException, address: str) -> str:
    """Why ``exc`` happened, in a few words: the system's reason when there is one."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.strerror and not isinstance(cause, NSQError):
            return cause.strerror
        cause = cause.__cause__ or cause.__context__
    text = one_line(exc)
    return text.removeprefix(f"{address}: ") or type(exc).__name__


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
        print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except (NSQError, OSError) as exc:
        print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def one_line(exc: BaseException) -> str:
    """``str(exc)`` on one line (newlines and runs of spaces made one space)."""
    return " ".join(str(exc).split()) or type(exc).__name__
