"""A recording TCP proxy between a client and nsqd, for transcript tests.

It forwards bytes both ways unchanged and parses what the *client* sends
into command lines (``b"RDY 5"``, ``b"FIN <id>"`` ...), so a test can assert
the exact commands a consumer sent, whichever nsqd (embedded or real) is
behind it. Only plaintext, uncompressed connections can be parsed.
"""

from __future__ import annotations

import contextlib
import struct
import time
from dataclasses import dataclass, field

import gevent
import gevent.event
import gevent.pool
import gevent.server
import gevent.socket

from gnsqlite.net import parse_address

__all__ = ["RecordingProxy", "Record"]

_BODY_COMMANDS = {b"IDENTIFY", b"AUTH", b"PUB", b"MPUB", b"DPUB"}


@dataclass
class Record:
    """One command a client sent: which proxied connection, when, and the line."""

    conn: int
    at: float
    line: bytes


@dataclass
class _CommandParser:
    buf: bytearray = field(default_factory=bytearray)
    magic_seen: bool = False

    def feed(self, data: bytes) -> list[bytes]:
        self.buf += data
        out: list[bytes] = []
        while True:
            if not self.magic_seen:
                if len(self.buf) < 4:
                    return out
                del self.buf[:4]
                self.magic_seen = True
                continue
            end = self.buf.find(b"\n")
            if end < 0:
                return out
            line = bytes(self.buf[:end])
            name = line.split(b" ", 1)[0]
            consumed = end + 1
            if name in _BODY_COMMANDS:
                if len(self.buf) < consumed + 4:
                    return out
                (size,) = struct.unpack_from(">I", self.buf, consumed)
                if len(self.buf) < consumed + 4 + size:
                    return out
                consumed += 4 + size
            del self.buf[:consumed]
            out.append(line)


class RecordingProxy:
    """Listens on 127.0.0.1 (a free port) and forwards to ``target`` ("host:port")."""

    def __init__(self, target: str) -> None:
        self.target = parse_address(target)
        self.records: list[Record] = []
        self.changed = gevent.event.Event()
        self._server = gevent.server.StreamServer(("127.0.0.1", 0), self._handle)
        self._pumps = gevent.pool.Group()
        self._socks: list[gevent.socket.socket] = []
        self._count = 0

    @property
    def address(self) -> str:
        return f"{self._server.server_host}:{self._server.server_port}"

    def start(self) -> RecordingProxy:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()
        self.cut()
        self._pumps.kill()

    def cut(self) -> None:
        """Close every proxied connection abruptly (the client sees EOF)."""
        for sock in self._socks:
            sock.close()
        self._socks.clear()

    def lines(self, conn: int | None = None, prefix: bytes = b"") -> list[bytes]:
        """The recorded command lines, optionally of one connection and prefix."""
        return [
            r.line
            for r in self.records
            if (conn is None or r.conn == conn) and r.line.startswith(prefix)
        ]

    def wait_for(self, predicate: object, timeout: float = 10.0) -> bool:
        """Block until ``predicate()`` is true after some record arrives; ``True`` if it did."""
        deadline = time.monotonic() + timeout
        while not predicate():  # type: ignore[operator]
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.changed.clear()
            self.changed.wait(min(left, 0.1))
        return True

    def _handle(self, client: gevent.socket.socket, _address: object) -> None:
        index = self._count
        self._count += 1
        upstream = gevent.socket.create_connection(self.target)
        self._socks += [client, upstream]
        parser = _CommandParser()

        def record(data: bytes) -> None:
            now = time.monotonic()
            for line in parser.feed(data):
                self.records.append(Record(index, now, line))
            self.changed.set()

        a = self._pumps.spawn(self._pump, client, upstream, record)
        b = self._pumps.spawn(self._pump, upstream, client, None)
        gevent.joinall([a, b], count=1)
        for sock in (client, upstream):
            sock.close()

    @staticmethod
    def _pump(src: gevent.socket.socket, dst: gevent.socket.socket, record: object) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if record is not None:
                    record(data)  # type: ignore[operator]
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(2)
