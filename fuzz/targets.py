"""Fuzz targets: each takes the fuzzer's bytes and may only raise gnsqlite's typed errors.

A target returns normally or raises :class:`~gnsqlite.errors.NSQError` (the
typed errors, caught by :func:`run_one`); anything else (``IndexError``,
``RecursionError``, a failed assertion of an invariant) is a finding. Every
target also checks what it can without an oracle: splitting the input
anywhere gives the same result, a bounded decode never returns more than
its bound, the HTTP API never answers 500.

Inputs are cut into chunks by their own first byte (:func:`_chunks`), so the
fuzzer controls where a stream is split as well as what it holds.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator
from typing import Any

from gnsqlite.broker.http_api import HttpApi
from gnsqlite.broker.state import BrokerState
from gnsqlite.codecs import DeflateCodec, SnappyCodec
from gnsqlite.errors import NSQError, ServerError
from gnsqlite.protocol.client import ClientConnection, ClientState
from gnsqlite.protocol.frames import FRAME_TYPE_MESSAGE, FrameDecoder, decode_message
from gnsqlite.protocol.server import (
    STATE_CLOSING,
    STATE_SUBSCRIBED,
    Cls,
    CommandParser,
    Identify,
    IdentifyLimits,
    Sub,
    negotiate_identify,
)

__all__ = ["TARGETS", "MODULES", "run_one"]

#: A small frame limit, so the fuzzer reaches "too big" with short inputs.
_MAX_FRAME = 4096
_DECODE_STEP = 1024
_LIMITS = IdentifyLimits(version="1.3.0", tls=False)


def _chunks(data: bytes) -> Iterator[bytes]:
    """Split ``data[1:]`` into pieces whose sizes cycle through ``data[0]``'s bits."""
    if not data:
        return
    step = (data[0] % 31) + 1
    rest = data[1:]
    pos = 0
    i = 0
    while pos < len(rest):
        size = step if i % 2 == 0 else (step * 7) % 64 + 1
        yield rest[pos : pos + size]
        pos += size
        i += 1


def frames(data: bytes) -> None:
    """FrameDecoder fed in pieces gives what it gives fed at once; messages decode."""
    whole = FrameDecoder(_MAX_FRAME)
    whole.feed(data[1:])
    try:
        expected: list[tuple[int, bytes]] | None = whole.frames()
    except NSQError:
        expected = None
    split = FrameDecoder(_MAX_FRAME)
    got: list[tuple[int, bytes]] = []
    try:
        for i, piece in enumerate(_chunks(data)):
            split.feed(piece)
            if i % 2:
                got += split.frames()
            else:
                while (frame := split.next_frame()) is not None:
                    got.append(frame)
        got += split.frames()
    except NSQError:
        assert expected is None or len(got) <= len(expected), "split failed, whole did not"
        raise
    assert expected is not None, "whole feed failed where the split feed did not"
    assert got == expected, "frames depend on where the stream was split"
    assert split.buffered <= _MAX_FRAME + 4
    for frame_type, payload in got:
        if frame_type == FRAME_TYPE_MESSAGE:
            decode_message(payload)


def client(data: bytes) -> None:
    """The client state machine fed nsqd's side of a conversation, split anywhere."""
    request = {
        "feature_negotiation": True,
        "snappy": bool(data[:1] and data[0] & 1),
        "deflate": bool(data[:1] and data[0] & 2),
    }
    machine = ClientConnection(max_frame_size=_MAX_FRAME)
    machine.start(request)
    for piece in _chunks(data):
        machine.receive_data(piece)
        for _ in range(8):  # each upgrade stops events(); a few suffice
            machine.events()
            machine.data_to_send()
            state = machine.state
            if state is ClientState.UPGRADING:
                rest = machine.take_unprocessed()
                machine.upgrade_started()
                machine.receive_data(rest)  # as if the codec passed it through
            elif state is ClientState.AUTH_REQUIRED:
                machine.auth(b"secret")
            elif state is ClientState.READY:
                machine.sub("t", "c")
                machine.pub("t", b"x")
            elif state is ClientState.SUBSCRIBED:
                machine.rdy(1)
                machine.fin(b"0123456789abcdef")
            else:
                break
            if state is machine.state:
                break
        if machine.state is ClientState.CLOSED:
            return


def _codec_target(make: Callable[[], Any], data: bytes) -> None:
    """Decode ``data`` split anywhere, bounded and not: same bytes, bound kept."""
    whole = make()
    try:
        expected: bytes | None = whole.decode(data[1:])
    except NSQError:
        expected = None
    bounded = make()
    out: list[bytes] = []
    try:
        for piece in _chunks(data):
            chunk = bounded.decode(piece, _DECODE_STEP)
            assert len(chunk) <= _DECODE_STEP, "a bounded decode returned more than its bound"
            out.append(chunk)
            while bounded.pending:
                chunk = bounded.decode(b"", _DECODE_STEP)
                assert len(chunk) <= _DECODE_STEP, "a bounded decode returned more than its bound"
                out.append(chunk)
    except NSQError:
        assert expected is None or len(b"".join(out)) <= len(expected)
        raise
    if expected is not None:
        assert b"".join(out) == expected, "decoded bytes depend on the split or the bound"


def snappy(data: bytes) -> None:
    """The snappy framing decoder: split and bounded decodes agree, typed errors only."""
    _codec_target(SnappyCodec, data)


def deflate(data: bytes) -> None:
    """The raw deflate decoder: split and bounded decodes agree, typed errors only."""
    _codec_target(DeflateCodec, data)


def command_parser(data: bytes) -> None:
    """nsqd's command parser (MPUB streaming included), acting like the broker on SUB/CLS."""
    parser = CommandParser(max_msg_size=256, max_body_size=1024, max_rdy_count=100)
    for piece in _chunks(b"\x00  V2" + data[1:] if data[:1] == b"\x00" else data):
        parser.feed(piece)
        while True:
            try:
                command = parser.next_command()
            except ServerError as err:
                if err.fatal:
                    return
                continue
            if command is None:
                break
            if isinstance(command, Sub):
                parser.state = STATE_SUBSCRIBED
            elif isinstance(command, Cls):
                parser.state = STATE_CLOSING
            elif isinstance(command, Identify):
                try:
                    negotiated = negotiate_identify(command.body, _LIMITS)
                except ServerError:
                    return
                parser.heartbeats_enabled = negotiated.heartbeat_interval_ms > 0
        assert len(parser._buf) - parser._pos <= len(data), "the parser holds more than it was fed"


def identify(data: bytes) -> None:
    """negotiate_identify on any body: a Negotiated or the fatal error nsqd sends."""
    negotiated = negotiate_identify(data, _LIMITS)
    assert negotiated.response == b"OK" or negotiated.response.startswith(b"{")


class _HttpHarness:
    """One in-process broker state and its WSGI app, renewed every 500 inputs."""

    def __init__(self) -> None:
        self.count = 0
        self.app = self._new()

    @staticmethod
    def _new() -> HttpApi:
        return HttpApi(BrokerState(max_msg_size=256, max_body_size=1024, max_req_timeout=10.0))

    def __call__(self, data: bytes) -> None:
        self.count += 1
        if self.count % 500 == 0:
            self.app = self._new()
        routes = sorted(self.app.routes)
        head, _, body = data.partition(b"\n")
        method = "GET" if head[:1] and head[0] & 1 else "POST"
        route = routes[head[0] % len(routes)] if head else "/pub"
        query = head[1:].decode("latin-1")
        length = str(len(body)) if not (head[:1] and head[0] & 2) else query[:4]
        environ = {
            "REQUEST_METHOD": method,
            "PATH_INFO": route,
            "QUERY_STRING": query,
            "CONTENT_LENGTH": length,
            "wsgi.input": io.BytesIO(body),
        }
        statuses: list[str] = []
        result = self.app(environ, lambda status, headers: statuses.append(status))
        b"".join(result)
        assert statuses and not statuses[0].startswith("500"), f"{route}?{query}: {statuses}"


http_api = _HttpHarness()

TARGETS: dict[str, Callable[[bytes], None]] = {
    "frames": frames,
    "client": client,
    "snappy": snappy,
    "deflate": deflate,
    "command_parser": command_parser,
    "identify": identify,
    "http_api": http_api,
}

#: The module each target exercises (for line coverage).
MODULES: dict[str, list[str]] = {
    "frames": ["gnsqlite/protocol/frames.py"],
    "client": ["gnsqlite/protocol/client.py", "gnsqlite/protocol/frames.py"],
    "snappy": ["gnsqlite/codecs.py"],
    "deflate": ["gnsqlite/codecs.py"],
    "command_parser": ["gnsqlite/protocol/server.py"],
    "identify": ["gnsqlite/protocol/server.py"],
    "http_api": ["gnsqlite/broker/http_api.py"],
}


def run_one(name: str, data: bytes) -> None:
    """Run target ``name`` on ``data``; typed errors are expected, anything else escapes."""
    with contextlib.suppress(NSQError):
        TARGETS[name](data)
