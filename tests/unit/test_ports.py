"""Recognising the other protocol's answer on a port (gnsqlite.protocol.ports), without sockets."""

from __future__ import annotations

import pytest

from gnsqlite.errors import RemoteProtocolError, WrongPortError
from gnsqlite.protocol import FrameDecoder
from gnsqlite.protocol.ports import tcp_answer_on_http_port

# The bytes nsqd v1.3.0 and nsqlookupd v1.3.0 answer on the wrong port (read from the binaries).
GO_HTTP_400 = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
NSQD_TCP_TO_GET = b"\x00\x00\x00\x12\x00\x00\x00\x01E_BAD_PROTOCOL"
LOOKUPD_TCP_TO_ANYTHING = b"\x00\x00\x00\x0eE_BAD_PROTOCOL"


def test_an_http_answer_where_frames_belong_names_nsqd_s_tcp_port() -> None:
    decoder = FrameDecoder()
    decoder.feed(GO_HTTP_400)
    with pytest.raises(WrongPortError, match=r"answered in HTTP.*usually 4150") as caught:
        decoder.next_frame()
    assert isinstance(caught.value, RemoteProtocolError)  # still what callers catch


def test_nsqlookupd_s_tcp_answer_where_nsqd_s_frames_belong() -> None:
    decoder = FrameDecoder()
    decoder.feed(LOOKUPD_TCP_TO_ANYTHING)
    with pytest.raises(WrongPortError, match=r"nsqlookupd's TCP port \(usually 4160\)"):
        decoder.next_frame()


def test_an_nsq_tcp_answer_where_an_http_status_belongs() -> None:
    nsqd = tcp_answer_on_http_port(NSQD_TCP_TO_GET)
    assert nsqd is not None and "nsqd's TCP port (usually 4150)" in nsqd and "4151" in nsqd
    lookupd = tcp_answer_on_http_port(LOOKUPD_TCP_TO_ANYTHING)
    assert lookupd is not None and "nsqlookupd's TCP port (usually 4160)" in lookupd
    assert tcp_answer_on_http_port(b"HTTP/1.1 200 OK\r\n") is None
    assert tcp_answer_on_http_port(b"") is None


def test_an_oversized_frame_is_still_the_plain_protocol_error() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    decoder.feed(b"\x7f\x00\x00\x00\x00\x00\x00\x00")
    with pytest.raises(RemoteProtocolError, match="exceeds the maximum") as caught:
        decoder.next_frame()
    assert not isinstance(caught.value, WrongPortError)
