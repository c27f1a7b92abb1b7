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
from .nsqd import NSQD_VERSION, Broker
from .options import BrokerOptions, parse_duration

__all__ = ["add_nsqd_flags", "build_parser", "main", "options_from_args", "options_from_namespace"]

log = logging.getLogger(__name__)


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "t", "true", "yes", "on"):
        return True
    if value in ("0", "f", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {text!r}")


def _tls_required(text: str) -> bool | str:
    """nsqd's ``--tls-required``: a boolean, or ``tcp-https`` (TLS on TCP only)."""
    return "tcp-https" if text.strip().lower() == "tcp-https" else _bool(text)


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


# flag name -> (option name, converter, kind); kind: "value", "bool", "list"
_FLAGS: dict[str, tuple[str, Callable[[str], Any], str]] = {
    "tcp-address": ("tcp_address", str, "value"),
    "http-address": ("http_address", str, "value"),
    "broadcast-address": ("broadcast_address", str, "value"),
    "lookupd-tcp-address": ("lookupd_tcp_addresses", str, "list"),
    "data-path": ("data_path", str, "value"),
    "msg-timeout": ("msg_timeout", _duration, "value"),
    "max-msg-timeout": ("max_msg_timeout", _duration, "value"),
    "max-msg-size": ("max_msg_size", _size, "value"),
    "max-body-size": ("max_body_size", _size, "value"),
    "max-rdy-count": ("max_rdy_count", _size, "value"),
    "max-channel-consumers": ("max_channel_consumers", _size, "value"),
    "max-connections": ("max_connections", _size, "value"),  # ours: nsqd has no such flag
    "max-heartbeat-interval": ("max_heartbeat_interval", _duration, "value"),
    "max-req-timeout": ("max_req_timeout", _duration, "value"),
    "max-output-buffer-size": ("max_output_buffer_size", _size, "value"),
    "output-buffer-timeout": ("output_buffer_timeout", _duration, "value"),
    "max-output-buffer-timeout": ("max_output_buffer_timeout", _duration, "value"),
    "min-output-buffer-timeout": ("min_output_buffer_timeout", _duration, "value"),
    "snappy": ("snappy", _bool, "bool"),
    "deflate": ("deflate", _bool, "bool"),
    "max-deflate-level": ("max_deflate_level", _size, "value"),
    "https-address": ("https_address", str, "value"),
    "tls-cert": ("tls_cert", str, "value"),
    "tls-key": ("tls_key", str, "value"),
    "tls-root-ca-file": ("tls_root_ca_file", str, "value"),
    "tls-required": ("tls_required", _tls_required, "bool"),  # or tcp-https
    "tls-client-auth-policy": ("tls_client_auth_policy", str, "value"),
    "tls-min-version": ("tls_min_version", str, "value"),
    "auth-http-address": ("auth_http_addresses", str, "list"),
    "http-client-request-timeout": ("http_client_timeout", _duration, "value"),
    "http-client-connect-timeout": ("http_client_connect_timeout", _duration, "value"),
}

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


# flag -> (metavar, help): nsqd v1.3.0's own words where they fit; the default
# is appended from BrokerOptions, in nsqd's units.
_HELP: dict[str, tuple[str, str]] = {
    "tcp-address": ("ADDR", "address to listen on for TCP clients (port 0: a free one)"),
    "http-address": ("ADDR", "address to listen on for HTTP clients (port 0: a free one)"),
    "broadcast-address": ("HOST", "address registered with lookupd (default: the listening host)"),
    "lookupd-tcp-address": ("ADDR", "nsqlookupd TCP address to register with (repeatable)"),
    "data-path": ("PATH", "directory to persist messages to at stop (default: none, nothing kept)"),
    "msg-timeout": ("DURATION", "default time before an unanswered message is requeued"),
    "max-msg-timeout": ("DURATION", "longest message timeout a client can ask for"),
    "max-msg-size": ("BYTES", "largest message body accepted"),
    "max-body-size": ("BYTES", "largest command body accepted (an MPUB's whole batch)"),
    "max-rdy-count": ("N", "largest RDY count a client may send"),
    "max-channel-consumers": ("N", "consumer connections allowed per channel (0: no limit)"),
    "max-connections": ("N", "TCP connections allowed (0: no limit; not an nsqd flag)"),
    "max-heartbeat-interval": ("DURATION", "longest heartbeat interval a client can ask for"),
    "max-req-timeout": ("DURATION", "longest requeue delay accepted"),
    "max-output-buffer-size": ("BYTES", "largest output buffer a client can ask for"),
    "output-buffer-timeout": ("DURATION", "default time between flushes to a client"),
    "max-output-buffer-timeout": ("DURATION", "longest flush interval a client can ask for"),
    "min-output-buffer-timeout": ("DURATION", "shortest flush interval a client can ask for"),
    "snappy": ("BOOL", "offer snappy compression to clients"),
    "deflate": ("BOOL", "offer deflate compression to clients"),
    "max-deflate-level": ("N", "highest deflate level a client can ask for (1-9)"),
    "https-address": ("ADDR", "address to serve the HTTP API over TLS on (needs --tls-cert)"),
    "tls-cert": ("PATH", "PEM certificate file (TLS upgrades, --https-address)"),
    "tls-key": ("PATH", "PEM key file of --tls-cert"),
    "tls-root-ca-file": ("PATH", "PEM file of the CAs that sign client certificates"),
    "tls-required": ("BOOL", "require TLS of clients: true, false or tcp-https (TCP only)"),
    "tls-client-auth-policy": ("POLICY", "ask clients for a certificate: require, require-verify"),
    "tls-min-version": ("VERSION", "oldest TLS accepted: tls1.0, tls1.1, tls1.2 or tls1.3"),
    "auth-http-address": ("ADDR", "auth server host:port or URL to ask (repeatable)"),
    "http-client-request-timeout": ("DURATION", "timeout of a request to lookupd or auth"),
    "http-client-connect-timeout": ("DURATION", "timeout of a connect to lookupd or auth"),
}


def _shown(value: Any, convert: Callable[[str], Any]) -> str:
    """``value`` (a BrokerOptions default) as nsqd's flags write it."""
    if value is None or value == ():
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if convert is _duration:
        seconds = float(value)
        if seconds >= 3600 and seconds % 3600 == 0:
            return f"{seconds / 3600:g}h"
        if seconds >= 60 and seconds % 60 == 0:
            return f"{seconds / 60:g}m"
        return f"{seconds:g}s" if seconds >= 1 else f"{seconds * 1000:g}ms"
    return str(value)


def add_nsqd_flags(parser: Any) -> None:
    """Add nsqd's flags, each with its help and default, to ``parser`` (or an argument group).

    Each is accepted as ``--flag`` and as nsqd's ``-flag``; help lists the first.
    """
    defaults = BrokerOptions()
    for flag, (dest, convert, kind) in _FLAGS.items():
        metavar, text = _HELP[flag]
        shown = text if "(default" in text else (
            f"{text} (default {_shown(getattr(defaults, dest), convert)})"
        )
        options: dict[str, Any] = {"dest": dest, "type": convert}
        if kind == "bool":
            options.update(nargs="?", const=True)
        elif kind == "list":
            options.update(action="append")
        parser.add_argument(f"--{flag}", metavar=metavar, help=shown, **options)
        parser.add_argument(f"-{flag}", help=argparse.SUPPRESS, **options)
    for flag in (*_IGNORED_VALUE, *_REFUSED):
        dest = flag.replace("-", "_")
        parser.add_argument(f"--{flag}", f"-{flag}", dest=dest, help=argparse.SUPPRESS)
    # nsqd v1.3.0: "[deprecated] has no effect, use --log-level"
    parser.add_argument("--verbose", "-verbose", nargs="?", const=True, help=argparse.SUPPRESS)
    parser.add_argument("--version", "-version", action="store_true",
                        help="print the version and exit")  # fmt: skip


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
    for dest, _, _ in _FLAGS.values():
        value = getattr(args, dest, None)
        if value is not None:
            options[dest] = value
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
