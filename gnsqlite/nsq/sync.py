"""pynsq's ``SyncConn``: a blocking connection that sends bytes and reads frames.

For scripts that speak the protocol by hand with the byte helpers of
:mod:`gnsqlite.nsq.protocol` (``conn.send(nsq.identify({...}))``,
``nsq.unpack_response(conn.read_response())``). It runs on
``gevent.socket``, so a call blocks only the calling greenlet; it does no
handshake beyond the magic, answers no heartbeat and decodes nothing. The
native :class:`gnsqlite.connection.Connection` does all of that.
"""

from __future__ import annotations

import struct
from typing import Any

from gevent import socket

from .protocol import MAGIC_V2

__all__ = ["SyncConn"]

_SIZE = struct.Struct(">l")
_RECV_SIZE = 4096


class SyncConn:
    """One TCP connection to nsqd; every call blocks the calling greenlet.

    ``timeout`` (seconds) bounds the connect and each receive or send.
    """

    def __init__(self, timeout: float = 1.0) -> None:
        self.buffer = b""
        self.timeout = timeout
        self.s: Any = None

    def connect(self, host: str, port: int) -> None:
        """Open the connection and send the protocol magic (``"  V2"``). Blocks."""
        if not isinstance(host, str):
            raise AssertionError(f"host must be a str, not {host!r}")
        if isinstance(port, bool) or not isinstance(port, int):
            raise AssertionError(f"port must be an int, not {port!r}")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.s = socket.socket(family, socket.SOCK_STREAM)
        self.s.settimeout(self.timeout)
        self.s.connect((host, port))
        self.send(MAGIC_V2)

    def _readn(self, size: int) -> bytes:
        while len(self.buffer) < size:
            packet = self.s.recv(_RECV_SIZE)
            if not packet:
                raise ConnectionError(f"failed to read {size} bytes: nsqd closed the connection")
            self.buffer += packet
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def read_response(self) -> bytes:
        """The next frame: its type (4 bytes) and data, without the size. Blocks."""
        size = _SIZE.unpack(self._readn(4))[0]
        return self._readn(size)

    def send(self, data: bytes) -> None:
        """Send ``data`` (a command built by :mod:`gnsqlite.nsq.protocol`). Blocks."""
        view = memoryview(data)
        while view:
            view = view[self.s.send(view) :]

    def close(self) -> None:
        """Close the socket (pynsq's SyncConn has no close; this one does)."""
        if self.s is not None:
            self.s.close()
