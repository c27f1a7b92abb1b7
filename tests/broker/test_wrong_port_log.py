"""The embedded broker logs a client on the wrong port in one plain line, as nsqd does.

gevent's pywsgi logged an NSQ client on the HTTP port with the socket's repr
(``<gevent._socket3.socket at 0x... fd=9 ...>: (from ('127.0.0.1', ...))``).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gnsqlite.broker.lookupd import Lookupd
from gnsqlite.broker.wsgi_log import plain_error_line
from gnsqlite.net import connect_tcp
from gnsqlite.testing import wait_until

pytestmark = pytest.mark.embedded_only


def _send_and_read(address: str, data: bytes) -> bytes:
    host, port = address.rsplit(":", 1)
    sock = connect_tcp((host, int(port)), 5.0)
    try:
        sock.settimeout(5.0)
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        return answer
    finally:
        sock.close()


def _lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_an_nsq_client_on_the_http_port_is_one_plain_line(
    make_broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    broker = make_broker()
    lookupd = Lookupd(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0")
    lookupd.start()
    try:
        with caplog.at_level(logging.INFO):
            for address in (broker.http_address, lookupd.http_address):
                answer = _send_and_read(address, b"  V2IDENTIFY\n\x00\x00\x00\x02{}")
                assert answer.startswith(b"HTTP/1.1 400")  # as nsqd's Go server answers
            wait_until(lambda: len(_lines(caplog, "bad request")) == 2)
    finally:
        lookupd.stop()
    for line in _lines(caplog, "bad request"):
        assert line.startswith("HTTP: client(127.0.0.1:"), line
        assert line.endswith("(an NSQ TCP client given the HTTP port?)"), line
        assert "\n" not in line and "socket" not in line and "from (" not in line, line


def test_an_http_client_on_the_tcp_port_is_one_plain_line(
    make_broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    broker = make_broker()
    with caplog.at_level(logging.INFO):
        answer = _send_and_read(broker.tcp_address, b"GET ")
        assert answer == b"\x00\x00\x00\x12\x00\x00\x00\x01E_BAD_PROTOCOL"
        wait_until(lambda: _lines(caplog, "bad protocol magic"))
    (line,) = _lines(caplog, "bad protocol magic")
    assert line.startswith("TCP: client(127.0.0.1:") and "ClientSession" not in line, line


def test_plain_error_line_drops_pywsgi_s_socket_and_from() -> None:
    line = plain_error_line("10.0.0.1:5", "(from ('10.0.0.1', 5)) Invalid HTTP method: 'x'")
    assert line == "HTTP: client(10.0.0.1:5) bad request: Invalid HTTP method: 'x'"
