"""A TCP proxy that hands the server's bytes to the client in small pieces.

TCP keeps no message boundaries: a client may read any prefix of what the
server wrote, down to a single byte, and a slow or congested network makes
that common. :class:`PieceProxy` makes it certain, so a test can check that
a client copes with reads that end anywhere (inside a frame, a snappy chunk
header or a deflate block). The client's bytes go to the server unchanged.

It runs in threads of its own (``threading`` and ``socket``), so it keeps
forwarding while a test blocks in another event loop (pynsq's tornado loop);
in a gevent-patched process those are greenlets, which serves gevent code
as well. Use it as a context manager::

    with PieceProxy(nsqd.tcp_address, piece_size=3) as proxy:
        client_under_test(proxy.address)
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType

__all__ = ["PieceProxy"]

_HOST = "127.0.0.1"
_RECV_SIZE = 65536


class PieceProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target``; server bytes leave ``piece_size`` at a time.

    ``gap`` (seconds) is the pause after each piece, long enough for the
    client to read it on its own. Constructing opens nothing: :meth:`start`
    listens (a free port, see :attr:`address`) and :meth:`close` stops every
    thread and socket. Each connection through it gets its own pair of
    forwarding threads.
    """

    def __init__(self, target: str, piece_size: int = 3, gap: float = 0.001) -> None:
        if piece_size < 1:
            raise ValueError(f"piece_size must be 1 or more, not {piece_size!r}")
        if gap < 0:
            raise ValueError(f"gap must be 0 s or more, not {gap!r}")
        host, _, port = target.rpartition(":")
        self.target = (host or _HOST, int(port))
        self.piece_size = piece_size
        self.gap = gap
        self.pieces_sent = 0
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()

    @property
    def address(self) -> str:
        """``"127.0.0.1:port"`` for the client (known once started)."""
        if self._listener is None:
            raise RuntimeError("PieceProxy.address is known once start() has run")
        return f"{_HOST}:{self._listener.getsockname()[1]}"

    def start(self) -> PieceProxy:
        """Listen and start accepting; returns at once."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((_HOST, 0))
        listener.listen(16)
        self._listener = listener
        self._spawn(self._accept_loop, listener)
        return self

    def close(self) -> None:
        """Close every socket and wait (at most 5 s) for the threads to end."""
        self._closed.set()
        with self._lock:
            sockets = ([self._listener] if self._listener else []) + self._sockets
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(5.0)

    def __enter__(self) -> PieceProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _accept_loop(self, listener: socket.socket) -> None:
        while not self._closed.is_set():
            try:
                client, _ = listener.accept()
                server = socket.create_connection(self.target, timeout=5.0)
            except OSError:
                return
            server.settimeout(None)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, server]
            self._spawn(self._pump, client, server, 0)
            self._spawn(self._pump, server, client, self.piece_size)

    def _pump(self, source: socket.socket, sink: socket.socket, piece_size: int) -> None:
        """Copy ``source`` to ``sink`` (in pieces when ``piece_size``) until either ends."""
        try:
            while True:
                data = source.recv(_RECV_SIZE)
                if not data:
                    break
                if not piece_size:
                    sink.sendall(data)
                    continue
                for start in range(0, len(data), piece_size):
                    sink.sendall(data[start : start + piece_size])
                    self.pieces_sent += 1
                    time.sleep(self.gap)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)
