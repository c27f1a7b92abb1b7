"""A raw-socket NSQ client for byte-level transcript tests of the embedded broker.

It speaks only what the test writes: no automatic IDENTIFY, no heartbeat
answers, so a test sees every frame nsqd sends and controls every byte sent.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import gevent
import gevent.socket
import gevent.ssl

from gnsqlite.codecs import Codec, make_codec
from gnsqlite.net import parse_address
from gnsqlite.protocol import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    FrameDecoder,
    WireMessage,
    decode_message,
)

__all__ = ["RawClient", "Closed"]


class Closed(Exception):
    """The broker closed the connection."""


class RawClient:
    """A socket to the broker plus a frame decoder; every call has a timeout."""

    def __init__(self, address: str, *, magic: bool = True, timeout: float = 5.0) -> None:
        self.sock: Any = gevent.socket.create_connection(parse_address(address), timeout=timeout)
        self.timeout = timeout
        self.decoder = FrameDecoder()
        self.codec: Codec | None = None
        if magic:
            self.sock.sendall(b"  V2")

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        if self.codec is not None:
            data = self.codec.encode(data)
        self.sock.sendall(data)

    def _recv(self) -> bytes:
        data: bytes = self.sock.recv(65536)
        if not data:
            raise Closed()
        if self.codec is not None:
            data = self.codec.decode(data)
        return data

    def frame(self, timeout: float | None = None) -> tuple[int, bytes]:
        """The next frame; raises :class:`Closed` at EOF, gevent.Timeout on timeout."""
        with gevent.Timeout(timeout or self.timeout):
            while True:
                frame = self.decoder.next_frame()
                if frame is not None:
                    return frame
                self.decoder.feed(self._recv())

    def frame_skipping_heartbeats(self, timeout: float | None = None) -> tuple[int, bytes]:
        while True:
            frame = self.frame(timeout)
            if frame != (FRAME_TYPE_RESPONSE, b"_heartbeat_"):
                return frame

    def response(self) -> bytes:
        kind, data = self.frame_skipping_heartbeats()
        assert kind == FRAME_TYPE_RESPONSE, (kind, data)
        return data

    def error(self) -> bytes:
        kind, data = self.frame_skipping_heartbeats()
        assert kind == FRAME_TYPE_ERROR, (kind, data)
        return data

    def message(self, timeout: float | None = None) -> WireMessage:
        kind, data = self.frame_skipping_heartbeats(timeout)
        assert kind == FRAME_TYPE_MESSAGE, (kind, data)
        return decode_message(data)

    def messages(self, n: int, timeout: float | None = None) -> list[WireMessage]:
        return [self.message(timeout) for _ in range(n)]

    def assert_closed(self, timeout: float = 5.0) -> None:
        """Every further read ends in EOF (frames before it are an error)."""
        with gevent.Timeout(timeout):
            try:
                while True:
                    frame = self.decoder.next_frame()
                    assert frame is None, f"unexpected frame before close: {frame!r}"
                    self.decoder.feed(self._recv())
            except (Closed, ConnectionResetError):
                return

    def assert_silent(self, duration: float = 0.3) -> None:
        """No frame (other than heartbeats) arrives within ``duration``."""
        try:
            frame = self.frame_skipping_heartbeats(duration)
        except gevent.Timeout:
            return
        raise AssertionError(f"unexpected frame {frame!r}")

    # -- commands ----------------------------------------------------------

    def command(self, line: bytes, body: bytes | None = None) -> None:
        data = line + b"\n"
        if body is not None:
            data += struct.pack(">i", len(body)) + body
        self.send(data)

    def identify(self, **fields: Any) -> bytes:
        """Send IDENTIFY and return the response data (JSON or OK)."""
        self.command(b"IDENTIFY", json.dumps(fields).encode())
        return self.response()

    def negotiate(self, **fields: Any) -> dict[str, Any]:
        fields.setdefault("feature_negotiation", True)
        answer: dict[str, Any] = json.loads(self.identify(**fields))
        return answer

    def upgrade_tls(self, ca_file: str | None = None, context: Any = None) -> None:
        """Upgrade to TLS trusting ``ca_file``, or with ``context`` (a client certificate...)."""
        if context is None:
            context = gevent.ssl.create_default_context(cafile=ca_file)
        # gevent.ssl.SSLSocket keeps the handshake cooperative whatever the context's class
        tls = gevent.ssl.SSLSocket(
            sock=self.sock,
            server_hostname="127.0.0.1",
            do_handshake_on_connect=False,
            _context=context,
        )
        tls.do_handshake()
        self.sock = tls
        assert self.response() == b"OK"

    def upgrade_codec(self, kind: str, level: int = 6) -> None:
        rest = self.decoder.take_unprocessed()
        self.codec = make_codec(kind, level)
        if rest:
            self.decoder.feed(self.codec.decode(rest))
        assert self.response() == b"OK"

    def sub(self, topic: str, channel: str, rdy: int | None = None) -> None:
        self.command(f"SUB {topic} {channel}".encode())
        assert self.response() == b"OK"
        if rdy is not None:
            self.rdy(rdy)

    def rdy(self, count: int) -> None:
        self.command(b"RDY %d" % count)

    def pub(self, topic: str, body: bytes) -> None:
        self.command(f"PUB {topic}".encode(), body)
        assert self.response() == b"OK"

    def mpub(self, topic: str, bodies: list[bytes]) -> None:
        payload = struct.pack(">i", len(bodies)) + b"".join(
            struct.pack(">i", len(b)) + b for b in bodies
        )
        self.command(f"MPUB {topic}".encode(), payload)
        assert self.response() == b"OK"

    def fin(self, message_id: bytes) -> None:
        self.command(b"FIN " + message_id)

    def req(self, message_id: bytes, ms: int) -> None:
        self.command(b"REQ %s %d" % (message_id, ms))

    def touch(self, message_id: bytes) -> None:
        self.command(b"TOUCH " + message_id)
