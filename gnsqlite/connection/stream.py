"""The stream seam: the few calls a connection's reader, writer and handshake make of a socket.

:class:`Stream` names them; :class:`SocketStream` is the real one (a gevent
TCP socket, or its TLS wrapper after the upgrade); :class:`MemoryStream` is
the one unit tests use: no socket, the test feeds the bytes nsqd would send
(:meth:`MemoryStream.feed`) and reads what the connection wrote
(:meth:`MemoryStream.take_written`). Compression is not the stream's: the
connection's codec sits above it (see :mod:`gnsqlite.connection.reader`).
"""

from __future__ import annotations

import contextlib
import functools
import socket as _stdlib_socket
import ssl as _stdlib_ssl
import threading
from collections.abc import Callable
from typing import Any, Protocol

import gevent.event
import gevent.ssl

from ..net import connect_tcp

__all__ = ["READ_SIZE", "MemoryStream", "SocketStream", "Stream", "read_buffer"]

#: The most one read takes, in bytes (a busy consumer's reads fill it).
READ_SIZE = 64 * 1024

_buffers = threading.local()  # each thread's read buffer (see read_buffer())


def read_buffer() -> memoryview:
    """The calling thread's read buffer, :data:`READ_SIZE` bytes, reused by every read.

    A socket's own ``recv(size)`` takes ``size`` bytes from the C heap for
    every read and shrinks them to what arrived: at a few hundred bytes a
    read, each of them carves 64 KiB out of glibc's heap, and a long run's
    heap fragments around what stays (a soak's RSS crept with its
    reconnects). A connection's reads land here instead (``recv_into``)
    and their bytes are copied out at their size at once, a small read in
    Python's own small-object memory. Nothing can switch greenlets between
    a read and its copy, so the connections of one thread share the
    buffer; another thread (a Spark task's hub) gets its own.
    """
    view: memoryview | None = getattr(_buffers, "view", None)
    if view is None:
        view = _buffers.view = memoryview(bytearray(READ_SIZE))
    return view


class Stream(Protocol):
    """A connected byte stream to nsqd, as the connection uses it.

    ``recv_into`` and ``sendall`` block the calling greenlet; ``send_nowait``
    never waits. ``hub_readable`` is the OS socket the hub may read itself
    (see :mod:`gnsqlite.connection.reader`) with ``hub_recv_into``, or
    ``None`` when the stream cannot be read that way (TLS, memory).
    """

    tls: bool
    hub_readable: Any
    hub_recv_into: Callable[[memoryview], int] | None  # never blocks: BlockingIOError

    def recv_into(self, buffer: memoryview) -> int:
        """Bytes into ``buffer`` (:func:`read_buffer`), how many; blocks until some arrive.

        0: the peer closed.
        """
        ...

    def wait_readable(self) -> object:
        """Block until ``recv`` has bytes to return (a hint: ``recv`` waits anyway)."""
        ...

    def send_nowait(self, data: bytes) -> int:
        """Send what the stream takes now, without waiting; returns the bytes taken.

        May raise ``BlockingIOError`` when it takes nothing.
        """
        ...

    def sendall(self, data: bytes | memoryview) -> None:
        """Send all of ``data``; blocks while the stream is full."""
        ...

    def start_tls(self, context: _stdlib_ssl.SSLContext, server_hostname: str) -> Stream:
        """The stream wrapped in TLS, after the TLS handshake; blocks. Raises ``ssl.SSLError``."""
        ...

    def close(self) -> None:
        """Shut the stream down in both directions and release it; never raises."""
        ...


def _nothing() -> None:
    """A wait that is not needed."""


class SocketStream:
    """A :class:`Stream` over a connected gevent socket (plain TCP or TLS)."""

    def __init__(self, sock: Any, tls: bool = False) -> None:
        self.socket = sock
        self.tls = tls
        # The OS socket under gevent's (non-blocking), for the hub's reads: plain TCP only.
        raw = None if tls else getattr(sock, "_sock", None)
        self.hub_readable: Any = raw
        self.recv_into: Callable[[memoryview], int] = sock.recv_into  # bound once: per read
        self.hub_recv_into = raw.recv_into if raw is not None else None
        # Bound once, no Python frame per flush: the non-blocking OS socket's
        # own send takes what it can and raises BlockingIOError when full.
        self.send_nowait: Callable[[bytes], int] = (
            raw.send if raw is not None else functools.partial(sock.send, flags=0, timeout=0.0)
        )
        # A plain gevent socket can be waited on before the receive: after a
        # short read the next receive would fail with EAGAIN (an exception per
        # round trip) before gevent waits anyway.
        wait = None if tls else getattr(sock, "_wait", None)
        readable = getattr(sock, "_read_event", None)
        self.wait_readable: Callable[[], object] = (
            functools.partial(wait, readable)
            if wait is not None and readable is not None
            else _nothing
        )

    @classmethod
    def connect(cls, address: tuple[str, int]) -> SocketStream:
        """A stream over a new TCP connection to ``address``; blocks. Raises ``OSError``."""
        return cls(connect_tcp(address))

    def sendall(self, data: bytes | memoryview) -> None:
        """See :meth:`Stream.sendall`: one ``send``, then ``sendall`` for any rest."""
        sent = self.socket.send(data)
        if sent < len(data):
            self.socket.sendall(memoryview(data)[sent:])

    def settimeout(self, timeout: float | None) -> None:
        """The socket's own timeout for blocking calls, in seconds (``None``: none)."""
        self.socket.settimeout(timeout)

    def start_tls(self, context: _stdlib_ssl.SSLContext, server_hostname: str) -> SocketStream:
        """See :meth:`Stream.start_tls`."""
        # gevent.ssl.SSLSocket accepts any SSLContext (a stdlib one too) and
        # keeps every operation cooperative; context.wrap_socket would not
        # when the user built the context with the stdlib ssl module.
        tls = gevent.ssl.SSLSocket(
            sock=self.socket,
            server_hostname=server_hostname,
            do_handshake_on_connect=False,
            _context=context,
        )
        tls.do_handshake()
        return SocketStream(tls, tls=True)

    def close(self) -> None:
        """See :meth:`Stream.close`."""
        with contextlib.suppress(OSError):
            self.socket.shutdown(_stdlib_socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.socket.close()


class MemoryStream:
    """A :class:`Stream` in memory, for tests: feed what nsqd sends, read what was written.

    ``recv`` blocks the calling greenlet until bytes are fed or
    :meth:`feed_eof` is called. ``start_tls`` encrypts nothing: it records
    the upgrade (:attr:`tls_hostname`) and returns the same stream, marked
    ``tls``, so a test sees where in the transcript the upgrade happened.
    ``send_limit`` caps what one ``send_nowait`` takes (``None``: all).
    """

    hub_readable = None
    hub_recv_into: Callable[[memoryview], int] | None = None

    def __init__(self, send_limit: int | None = None) -> None:
        self.tls = False
        self.tls_hostname: str | None = None
        self.closed = False
        self.send_limit = send_limit
        self.sends: list[bytes] = []  # every send, as the connection made it
        self._incoming = bytearray()
        self._eof = False
        self._readable = gevent.event.Event()

    def feed(self, data: bytes) -> None:
        """Bytes nsqd sends; a greenlet blocked in ``recv`` wakes."""
        self._incoming += data
        self._readable.set()

    def feed_eof(self) -> None:
        """nsqd closes the connection: ``recv`` returns ``b""`` once the bytes fed are read."""
        self._eof = True
        self._readable.set()

    def take_written(self) -> bytes:
        """Everything written since the last call, in order."""
        data = b"".join(self.sends)
        self.sends.clear()
        return data

    def recv_into(self, buffer: memoryview) -> int:
        """See :meth:`Stream.recv_into`."""
        while not self._incoming and not self._eof:
            self._readable.clear()
            self._readable.wait()
        size = min(len(buffer), len(self._incoming))
        buffer[:size] = self._incoming[:size]
        del self._incoming[:size]
        return size

    def wait_readable(self) -> None:
        """See :meth:`Stream.wait_readable` (``recv_into`` waits itself)."""

    def send_nowait(self, data: bytes) -> int:
        """See :meth:`Stream.send_nowait`: takes up to ``send_limit`` bytes."""
        if self.closed:
            raise BrokenPipeError("the memory stream is closed")
        taken = data if self.send_limit is None else data[: self.send_limit]
        if taken:
            self.sends.append(bytes(taken))
        return len(taken)

    def sendall(self, data: bytes | memoryview) -> None:
        """See :meth:`Stream.sendall`."""
        if self.closed:
            raise BrokenPipeError("the memory stream is closed")
        self.sends.append(bytes(data))

    def start_tls(self, context: _stdlib_ssl.SSLContext, server_hostname: str) -> MemoryStream:
        """See the class docstring: records the upgrade, encrypts nothing."""
        self.tls = True
        self.tls_hostname = server_hostname
        return self

    def close(self) -> None:
        """See :meth:`Stream.close`; a blocked ``recv`` returns ``b""``."""
        self.closed = True
        self.feed_eof()
