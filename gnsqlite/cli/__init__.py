"""The ``gnsqlite`` command: everyday NSQ chores from a shell.

::

    gnsqlite demo                                   # broker, lookupd, traffic and dashboard
    gnsqlite broker --lookupd                       # an embedded nsqd (and nsqlookupd)
    gnsqlite tail --topic clicks --nsqd-tcp-address 127.0.0.1:4150
    gnsqlite pub --topic clicks --nsqd-tcp-address 127.0.0.1:4150 events.txt
    gnsqlite stats --nsqd-http-address 127.0.0.1:4151
    gnsqlite bench --compare
    gnsqlite dashboard --lookupd-http-address 127.0.0.1:4161

Each subcommand lives in its own module (``gnsqlite.cli.tail`` ...) with a
``main(argv) -> int``; ``python -m gnsqlite`` runs the same command.
Installed as the ``gnsqlite`` console script (``gnsqlite.cli:main``).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from .. import compiled
from .._version import __version__

__all__ = ["COMMANDS", "main"]

#: Subcommand name -> one-line summary (the module is ``gnsqlite.cli.<name>``).
COMMANDS: dict[str, str] = {
    "demo": "run a broker, lookupd, producer, consumer and the live dashboard",
    "broker": "run the embedded nsqd (and, with --lookupd, nsqlookupd)",
    "tail": "print the messages of a topic as they arrive",
    "pub": "publish the lines (or records) of a file or stdin, in MPUB batches;"
    " or re-publish dead letters",
    "stats": "a table of topics, channels, depth, in-flight, requeued, timed out, clients",
    "bench": "publish and consume benchmarks (optionally against pynsq and gnsq)",
    "dashboard": "serve the live dashboard of a running cluster (nsqd/lookupd HTTP)",
}

_USAGE = """usage: gnsqlite <command> [options]

A gevent-native NSQ client: commands for everyday NSQ chores.

commands:
{commands}

Run 'gnsqlite <command> --help' for a command's options and examples.

examples:
  gnsqlite demo
  gnsqlite broker --lookupd
  gnsqlite tail --topic clicks --lookupd-http-address 127.0.0.1:4161
  seq 1000 | gnsqlite pub --topic numbers --nsqd-tcp-address 127.0.0.1:4150
"""


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = "\n".join(f"  {name:<{width}}  {summary}" for name, summary in COMMANDS.items())
    return _USAGE.format(commands=lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gnsqlite`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    Blocks until the subcommand ends (``tail``, ``broker`` and ``demo`` run
    until Ctrl-C).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage(), end="")
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        print(f"gnsqlite {__version__} ({'compiled' if compiled else 'pure Python'})")
        return 0
    name = args[0]
    if name not in COMMANDS:
        print(
            f"gnsqlite: error: unknown command {name!r}; use one of {', '.join(COMMANDS)}",
            file=sys.stderr,
        )
        return 2
    module = importlib.import_module(f"{__name__}.{name}")
    try:
        status: int = module.main(args[1:])
    except BrokenPipeError:  # the reader went away (`gnsqlite ... | head`)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the exit's flush does not fail again
        return 1
    return status
