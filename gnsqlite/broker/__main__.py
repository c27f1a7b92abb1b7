"""``python -m gnsqlite.broker``: run the embedded nsqd with nsqd's flags.

Flags are nsqd's (``--tcp-address``, ``--msg-timeout=60s`` ...), with one or
two dashes, ``--flag value`` or ``--flag=value``; durations take Go duration
strings. Runs until SIGINT or SIGTERM, then stops cleanly (persisting to
``--data-path``) and exits 0.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

import gevent
import gevent.event

from ..errors import ConfigError
from ..options import Option, options_of
from .nsqd import NSQD_VERSION, Broker
from .options import BrokerOptions, format_duration, parse_bool, parse_duration

__all__ = ["add_nsqd_flags", "build_parser", "main", "options_from_args", "options_from_namespace"]

log = logging.getLogger(__name__)


def _duration(text: str) -> float:
    stripped = text.strip()
    try:
        if stripped.lstrip("-").isdigit() and stripped not in ("0", "-0"):
            return int(stripped) / 1000  # a bare number: milliseconds, like old nsqd
        return parse_duration(stripped)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _size(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def _parsed_by(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` (an option's text parser, raising ``ValueError``) as an argparse type."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__
    return convert


_bool = _parsed_by(parse_bool)


def _converter(declared: Option) -> Callable[[str], Any]:
    """How a flag's text becomes the option's value: nsqd's spellings of its kind."""
    if declared.parse is not None:
        return _parsed_by(declared.parse)
    if bool in declared.kinds:
        return _bool
    if float in declared.kinds:
        return _duration  # every duration flag takes Go's duration strings
    if int in declared.kinds:
        return _size
    return str


#: BrokerOptions' options that nsqd takes as flags, in declaration order.
_FLAGGED = tuple(o for o in options_of(BrokerOptions) if o.flag is not None)

# nsqd flags accepted and ignored, because in this broker they have no effect a
# client or an HTTP caller could see:
# * log-level, log-prefix: logging only (the broker logs at INFO, "[nsqd] " first;
#   benchmarks/bench_broker.py reads its "listening" line under --log-level=warn);
# * max-bytes-per-file, sync-every, sync-timeout: tune nsqd's disk queue files,
#   which the embedded broker does not have;
# * statsd-prefix, statsd-interval, statsd-mem-stats, statsd-udp-packet-size:
#   shape what nsqd sends to statsd-address, which is refused below unless empty;
# * e2e-processing-latency-window-time: only used with a percentile, refused below;
# * node-id: the high bits of nsqd's message ids; ids are opaque to clients and the
#   broker's own are unique without it (the range is still checked, as nsqd does);
# * mem-queue-size: the broker keeps every message in memory, so it behaves like
#   nsqd with a queue that never fills. Past nsqd's limit the two differ (nsqd
#   spills to disk, reports backend_depth, drops ephemeral channels' overflow);
#   docs/testing.md lists that. Kept because the test harness and the benchmarks
#   pass it to both brokers to keep the real nsqd in memory.
_IGNORED_VALUE = (
    "log-level",
    "log-prefix",
    "node-id",
    "mem-queue-size",
    "max-bytes-per-file",
    "sync-every",
    "sync-timeout",
    "statsd-prefix",
    "statsd-interval",
    "statsd-mem-stats",
    "statsd-udp-packet-size",
    "e2e-processing-latency-window-time",
)
# nsqd flags the broker cannot honour: refused at start (exit status 2) when set
# to anything but the value that turns the feature off, with what to do instead.
_REFUSED = {
    "statsd-address": "the embedded broker sends no statsd metrics; leave it empty",
    "e2e-processing-latency-percentile": (
        "the embedded broker does not compute end-to-end latency percentiles for /stats; "
        "leave it unset"
    ),
    "config": "the embedded broker reads no config file; pass its settings as flags",
}


def _shown(value: Any, convert: Callable[[str], Any]) -> str:
    """``value`` (a BrokerOptions default) as nsqd's flags write it."""
    if value is None or value == ():
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if convert is _duration:
        return format_duration(float(value))
    return str(value)


def _metavar(declared: Option, convert: Callable[[str], Any]) -> str:
    if declared.metavar is not None:
        return declared.metavar
    if convert is _duration:
        return "DURATION"
    if convert is _bool:
        return "BOOL"
    return "BYTES" if declared.unit == "bytes" else "VALUE"


def add_nsqd_flags(parser: Any) -> None:
    """Add nsqd's flags, each with its help and default, to ``parser`` (or an argument group).

    Each is accepted as ``--flag`` and as nsqd's ``-flag``; help lists the
    first. The flags, their help and defaults are BrokerOptions' declarations.
    """
    for declared in _FLAGGED:
        convert = _converter(declared)
        text = declared.doc
        shown = (
            text
            if "(default" in text
            else (f"{text} (default {_shown(declared.default, convert)})")
        )
        options: dict[str, Any] = {"dest": declared.name, "type": convert}
        if bool in declared.kinds:
            options.update(nargs="?", const=True)
        elif list in declared.kinds:
            options.update(action="append")
        metavar = _metavar(declared, convert)
        parser.add_argument(f"--{declared.flag}", metavar=metavar, help=shown, **options)
        parser.add_argument(f"-{declared.flag}", help=argparse.SUPPRESS, **options)
    for flag in (*_IGNORED_VALUE, *_REFUSED):
        dest = flag.replace("-", "_")
        parser.add_argument(f"--{flag}", f"-{flag}", dest=dest, help=argparse.SUPPRESS)
    # nsqd v1.3.0: "[deprecated] has no effect, use --log-level"
    parser.add_argument("--verbose", "-verbose", nargs="?", const=True, help=argparse.SUPPRESS)
    parser.add_argument(
        "--version", "-version", action="store_true", help="print the version and exit"
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, accepting ``-flag`` and ``--flag`` forms."""
    parser = argparse.ArgumentParser(
        prog="python -m gnsqlite.broker",
        usage="%(prog)s [options]",
        description="An embedded nsqd-compatible broker (gnsqlite). Every flag is also"
        " accepted in nsqd's one-dash form (-tcp-address); durations are Go's (60s, 1m0s,"
        " 500ms).",
        allow_abbrev=False,
    )
    add_nsqd_flags(parser)
    return parser


def options_from_args(argv: Sequence[str]) -> dict[str, Any]:
    """Broker options (Python units) from a command line; exits on a bad flag."""
    parser = build_parser()
    return options_from_namespace(parser, parser.parse_args(list(argv)))


def options_from_namespace(parser: argparse.ArgumentParser, args: Any) -> dict[str, Any]:
    """Broker options (Python units) from parsed nsqd flags; ``parser.error`` on a refused one.

    ``--version`` prints the version and exits 0.
    """
    for flag, advice in _REFUSED.items():
        if getattr(args, flag.replace("-", "_")):
            parser.error(f"--{flag}={getattr(args, flag.replace('-', '_'))}: {advice}")
    node_id = args.node_id
    if node_id is not None and not (node_id.lstrip("-").isdigit() and 0 <= int(node_id) < 1024):
        parser.error(f"--node-id={node_id}: must be an integer in [0,1024)")
    if args.version:
        print(f"nsqd v{NSQD_VERSION} (gnsqlite embedded broker)")
        raise SystemExit(0)
    options: dict[str, Any] = {}
    for declared in _FLAGGED:
        value = getattr(args, declared.name, None)
        if value is not None:
            options[declared.name] = value
    return options


def main(argv: Sequence[str] | None = None) -> int:
    """Run a broker until SIGINT/SIGTERM; returns the exit status."""
    logging.basicConfig(level=logging.INFO, format="[nsqd] %(asctime)s %(levelname)s: %(message)s")
    options = options_from_args(sys.argv[1:] if argv is None else argv)
    try:
        broker = Broker(**options)
    except ConfigError as exc:
        log.error("bad option: %s", exc)
        return 2
    stop = gevent.event.Event()
    handlers = [gevent.signal_handler(sig, stop.set) for sig in (signal.SIGINT, signal.SIGTERM)]
    try:
        broker.start()
    except (OSError, ConfigError) as exc:  # a port taken, a bad PEM file, 'require' unsupported
        log.error("failed to start: %s", exc)
        return 1
    try:
        stop.wait()
    finally:
        log.info("exiting")
        broker.stop()
        for handler in handlers:
            handler.cancel()
    return 0


if __name__ == "__main__":
    sys.exit(main())
