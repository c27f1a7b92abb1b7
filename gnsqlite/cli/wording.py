"""The one wording of a failure, for every ``gnsqlite`` subcommand and every example.

A failure is printed as one line, ``<program>: error: <what went wrong>``
(see :func:`error_line`), and a server that cannot be used is always worded
the same way::

    cannot reach nsqd at 127.0.0.1:4150: Connection refused
    wrong port for nsqd at 127.0.0.1:4151: it answered in HTTP: ...; give nsqd's TCP
    port (usually 4150)

with the address once and the system's reason, not the library's chain of
``host:port: connect failed: [Errno 111] ...``. Exit statuses are the
:data:`EXIT_*` constants; docs/cli.md states the rule. Examples end with
:func:`fail`, and log the library's warnings the same way with
:func:`log_on_one_line` (an exception named, not its traceback).
"""

from __future__ import annotations

import logging
import re
import sys
from typing import NoReturn

from ..errors import (
    NoConnectionsError,
    NSQConnectionError,
    NSQError,
    NSQTimeoutError,
    WrongPortError,
)

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "OneLineFormatter",
    "describe",
    "error_line",
    "exit_status",
    "fail",
    "log_on_one_line",
    "one_line",
    "unreachable",
]

#: Exit status when the command did all it was asked; for a command that runs
#: until stopped (tail without -n, broker, demo, dashboard), a Ctrl-C or
#: SIGTERM is how it is asked to stop.
EXIT_OK = 0
#: Exit status for a failure at run time (a server unreachable, records refused):
#: something the command was asked to do was not done. It wins over 130.
EXIT_ERROR = 1
#: Exit status for bad input (flags, names, addresses), like argparse's.
EXIT_USAGE = 2
#: Exit status when Ctrl-C (SIGINT) cut a job with an end short (128 + SIGINT):
#: what was done before is reported, nothing silently dropped.
EXIT_INTERRUPTED = 130

_ADDRESSED = re.compile(r"^(\[[^\]]+\]:\d+|[^\s:]+:\d+): (.*)$", re.DOTALL)


def one_line(exc: BaseException) -> str:
    """``str(exc)`` on one line (newlines and runs of spaces made one space)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def unreachable(what: str, address: str, exc: BaseException) -> str:
    """The words for server ``what`` (``"nsqd"``, ``"nsqlookupd"``) at ``address`` failing."""
    said = one_line(exc).removeprefix(f"{address}: ")
    if isinstance(exc, WrongPortError):
        return f"wrong port for {what} at {address}: {said}"
    return f"cannot reach {what} at {address}: {_reason(exc) or said}"


def describe(exc: BaseException, what: str = "nsqd") -> str:
    """The words for any failure; a connection failure names server ``what`` and its address."""
    if isinstance(exc, NoConnectionsError) and exc.errors:
        first_address, first = next(iter(exc.errors.items()))
        return unreachable(what, first_address, first)
    if isinstance(exc, (NSQConnectionError, NSQTimeoutError, WrongPortError)):
        address: str | None = getattr(exc, "address", None)
        match = _ADDRESSED.match(str(exc))
        if address is None and match is not None:
            address = match.group(1)
        if address is not None:
            return unreachable(what, address, exc)
    return one_line(exc)


def error_line(program: str, exc: BaseException, what: str = "nsqd") -> str:
    """``"<program>: error: <describe(exc)>"``: the line a command or example prints."""
    return f"{program}: error: {describe(exc, what)}"


def exit_status(exc: BaseException) -> int:
    """:data:`EXIT_USAGE` for bad input (a ``ValueError``: ConfigError, InvalidNameError ...),
    :data:`EXIT_ERROR` for any other failure."""
    return EXIT_USAGE if isinstance(exc, ValueError) else EXIT_ERROR


def fail(program: str, exc: BaseException, what: str = "nsqd") -> NoReturn:
    """Print :func:`error_line` on stderr and exit with :func:`exit_status` (an example's end)."""
    print(error_line(program, exc, what), file=sys.stderr)
    raise SystemExit(exit_status(exc))


class OneLineFormatter(logging.Formatter):
    """A log record as one line, ``<program>: <level>: <message> (<Type>: <error>)``.

    A record logged with an exception (the consumer's ``handler failed on ...``)
    names it at the end instead of printing its traceback.
    """

    def __init__(self, program: str) -> None:
        super().__init__()
        self.program = program

    def format(self, record: logging.LogRecord) -> str:
        """The one line (no newline in it)."""
        message = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            message += f" ({type(exc).__name__}: {exc})"
        return " ".join(f"{self.program}: {record.levelname.lower()}: {message}".split())


def log_on_one_line(program: str, level: int = logging.WARNING) -> None:
    """Print the library's log records of ``level`` and above on stderr, one line each."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter(program))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def _reason(exc: BaseException) -> str | None:
    """The system's reason (``Connection refused``) found along ``exc``'s causes."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.strerror and not isinstance(cause, NSQError):
            return cause.strerror
        cause = cause.__cause__ or cause.__context__
    return None
