"""nsqd's defaults are named once (``gnsqlite/protocol/defaults.py``) and are nsqd's.

Three checks: the values against the real nsqd's ``--help`` (with
``GNSQLITE_NSQD`` set), an IDENTIFY that asks for nothing answered with
them by whichever nsqd runs, and every place that means "nsqd's default"
(the broker's options, the server state machine, the client's configs and
what it assumes when nsqd negotiates nothing) reading that one module.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from nsqd_raw import RawClient

from gnsqlite.broker import BrokerOptions
from gnsqlite.broker.__main__ import build_parser
from gnsqlite.broker.lookupd import Lookupd
from gnsqlite.broker.options import parse_duration
from gnsqlite.broker.state import BrokerState
from gnsqlite.config import ConnectionConfig, ConsumerConfig, ProducerConfig
from gnsqlite.protocol import ClientConnection, defaults
from gnsqlite.protocol.negotiate import IdentifyLimits
from gnsqlite.protocol.replies import identify_features
from gnsqlite.protocol.server import CommandParser
from gnsqlite.testing import NsqdServer

#: nsqd's flag -> (the name in defaults.py, the BrokerOptions field that takes it)
FLAGS = {
    "max-msg-size": ("MAX_MSG_SIZE", "max_msg_size"),
    "max-body-size": ("MAX_BODY_SIZE", "max_body_size"),
    "max-rdy-count": ("MAX_RDY_COUNT", "max_rdy_count"),
    "msg-timeout": ("MSG_TIMEOUT", "msg_timeout"),
    "max-msg-timeout": ("MAX_MSG_TIMEOUT", "max_msg_timeout"),
    "max-req-timeout": ("MAX_REQ_TIMEOUT", "max_req_timeout"),
    "max-heartbeat-interval": ("MAX_HEARTBEAT_INTERVAL", "max_heartbeat_interval"),
    "max-output-buffer-size": ("MAX_OUTPUT_BUFFER_SIZE", "max_output_buffer_size"),
    "output-buffer-timeout": ("OUTPUT_BUFFER_TIMEOUT", "output_buffer_timeout"),
    "min-output-buffer-timeout": ("MIN_OUTPUT_BUFFER_TIMEOUT", "min_output_buffer_timeout"),
    "max-output-buffer-timeout": ("MAX_OUTPUT_BUFFER_TIMEOUT", "max_output_buffer_timeout"),
    "max-deflate-level": ("MAX_DEFLATE_LEVEL", "max_deflate_level"),
    "http-client-connect-timeout": ("HTTP_CLIENT_CONNECT_TIMEOUT", "http_client_connect_timeout"),
    "http-client-request-timeout": ("HTTP_CLIENT_REQUEST_TIMEOUT", "http_client_timeout"),
}


def _help_defaults(text: str) -> dict[str, str]:
    """flag -> the ``(default X)`` written in a ``--help`` text (Go's or argparse's)."""
    found: dict[str, str] = {}
    for match in re.finditer(r"-{1,2}([a-z0-9-]+)[^\n]*(?:\n(?!\s*-)[^\n]*)*", text):
        default = re.search(r"\(default ([^)\s]+)\)", match.group(0))
        if default:
            found.setdefault(match.group(1), default.group(1).strip('"'))
    return found


def _seconds_or_int(text: str) -> float:
    return float(text) if text.isdigit() else parse_duration(text)


def test_help_parser_reads_go_and_argparse_texts() -> None:
    go = "  -max-msg-size int\n    \tmaximum size (default 1048576)\n  -msg-timeout duration\n"
    go += "    \tdefault duration (default 1m0s)\n"
    assert _help_defaults(go) == {"max-msg-size": "1048576", "msg-timeout": "1m0s"}


@pytest.mark.skipif(not os.environ.get("GNSQLITE_NSQD"), reason="needs the real nsqd")
def test_defaults_are_the_real_nsqds_help() -> None:
    binary = os.path.join(os.environ["GNSQLITE_NSQD"], "nsqd")
    text = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10)
    real = _help_defaults(text.stdout + text.stderr)
    for flag, (name, _) in FLAGS.items():
        assert flag in real, f"nsqd --help no longer shows --{flag}"
        assert _seconds_or_int(real[flag]) == getattr(defaults, name), (
            f"nsqd's --{flag} defaults to {real[flag]}; protocol/defaults.py has"
            f" {name} = {getattr(defaults, name)!r}"
        )


@pytest.mark.skipif(not os.environ.get("GNSQLITE_NSQD"), reason="needs the real nsqlookupd")
def test_lookupd_defaults_are_the_real_nsqlookupds_help() -> None:
    binary = os.path.join(os.environ["GNSQLITE_NSQD"], "nsqlookupd")
    text = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10)
    real = _help_defaults(text.stdout + text.stderr)
    assert parse_duration(real["inactive-producer-timeout"]) == defaults.INACTIVE_PRODUCER_TIMEOUT
    assert parse_duration(real["tombstone-lifetime"]) == defaults.TOMBSTONE_LIFETIME
    server = Lookupd("127.0.0.1:0", "127.0.0.1:0")  # opens nothing until start()
    assert (server.inactive_producer_timeout, server.tombstone_lifetime) == (
        defaults.INACTIVE_PRODUCER_TIMEOUT,
        defaults.TOMBSTONE_LIFETIME,
    )


def test_the_broker_takes_its_defaults_and_shows_them_in_help() -> None:
    options = BrokerOptions()
    shown = {}  # each flag's help, unwrapped
    for action in build_parser()._actions:
        found = re.search(r"\(default ([^)\s]+)\)", action.help or "")
        if found:
            shown[action.option_strings[0][2:]] = found.group(1)
    for flag, (name, field) in FLAGS.items():
        assert getattr(options, field) == getattr(defaults, name), field
        assert _seconds_or_int(shown[flag]) == getattr(defaults, name), flag
    assert options.client_timeout == defaults.CLIENT_TIMEOUT
    # the broker's IDENTIFY limits are the pure server's defaults when no option is given
    limits = BrokerState().identify_limits
    assert limits == IdentifyLimits(limits.version)


def test_the_server_state_machine_and_the_clients_assume_the_same() -> None:
    parser = CommandParser()
    assert (parser.max_msg_size, parser.max_body_size) == (
        defaults.MAX_MSG_SIZE,
        defaults.MAX_BODY_SIZE,
    )
    assert parser.max_rdy_count == defaults.MAX_RDY_COUNT
    assert parser.max_req_timeout_ms == defaults.MAX_REQ_TIMEOUT * 1000
    connection = ConnectionConfig()
    assert connection.heartbeat_interval == defaults.HEARTBEAT_INTERVAL
    assert connection.output_buffer_size == defaults.OUTPUT_BUFFER_SIZE
    assert connection.output_buffer_timeout == defaults.OUTPUT_BUFFER_TIMEOUT
    assert connection.max_frame_size == defaults.MAX_FRAME_SIZE > defaults.MAX_MSG_SIZE
    producer = ProducerConfig()
    assert (producer.max_message_size, producer.max_body_size) == (
        defaults.MAX_MSG_SIZE,
        defaults.MAX_BODY_SIZE,
    )
    assert ConsumerConfig().low_rdy_timeout == defaults.LOW_RDY_TIMEOUT
    # an nsqd that answers IDENTIFY with a plain OK is assumed to have its default RDY limit
    assert identify_features(b"OK")[0]["max_rdy_count"] == defaults.MAX_RDY_COUNT
    assert ClientConnection().max_rdy_count == defaults.MAX_RDY_COUNT


def test_an_identify_asking_for_nothing_gets_the_defaults(nsqd: NsqdServer) -> None:
    with RawClient(nsqd.tcp_address) as client:
        answer = client.negotiate()
    assert answer["max_rdy_count"] == defaults.MAX_RDY_COUNT
    assert answer["msg_timeout"] == defaults.MSG_TIMEOUT * 1000
    assert answer["max_msg_timeout"] == defaults.MAX_MSG_TIMEOUT * 1000
    assert answer["output_buffer_size"] == defaults.OUTPUT_BUFFER_SIZE
    assert answer["output_buffer_timeout"] == defaults.OUTPUT_BUFFER_TIMEOUT * 1000
    assert answer["max_deflate_level"] == defaults.MAX_DEFLATE_LEVEL
