"""TCP proxies that misbehave on command, to prove a client survives the network.

* :class:`FaultProxy` forwards ``127.0.0.1:<port>`` to a server and, when a
  test says so, delays every byte (:meth:`~FaultProxy.delay`), cuts the
  connections with a TCP reset (:meth:`~FaultProxy.cut`), half-closes them
  (:meth:`~FaultProxy.half_close`) or stops forwarding without closing
  anything (:meth:`~FaultProxy.stall`, :meth:`~FaultProxy.resume`).
* :class:`PieceProxy` is a :class:`FaultProxy` that hands the server's bytes
  to the client in small pieces. TCP keeps no message boundaries: a client
  may read any prefix of what the server wrote, down to a single byte, and a
  slow or congested network makes that common. The piece proxy makes it
  certain, so a test can check that a client copes with reads that end
  anywhere (inside a frame, a snappy chunk header or a deflate block).

Both run in threads of their own (``threading`` and ``socket``), so they keep
forwarding while a test blocks in another event loop (pynsq's tornado loop)
or in gevent code; in a gevent-patched process those are greenlets, which
serves as well. Use them as context managers::

    with FaultProxy(nsqd.tcp_address) as proxy:
        consumer = Consumer("t", "c", handle, nsqd_tcp_addresses=[proxy.address])
        ...
        proxy.cut()           # every connection through it gets a RST
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable
from types import TracebackType

__all__ = ["FaultProxy", "PieceProxy", "ProxiedConnection"]

_HOST = "127.0.0.1"
_RECV_SIZE = 65536
_POLL = 0.02  # seconds a stalled pump waits between looks at its connection
_LINGER_RST = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


class ProxiedConnection:
    """One client connection through a :class:`FaultProxy` and its server side.

    ``number`` counts from 1 in accept order. ``ended`` is set once both
    sockets are closed, whoever closed them.
    """

    def __init__(self, number: int, client: socket.socket, server: socket.socket) -> None:
        self.number = number
        self.client = client
        self.server = server
        self.ended = threading.Event()
        self._cut = False
        self._eofs = 0  # directions that reached end-of-stream
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        state = "cut" if self._cut else "ended" if self.ended.is_set() else "open"
        return f"<ProxiedConnection #{self.number} {state}>"

    @property
    def was_cut(self) -> bool:
        """True when :meth:`cut` ended it."""
        return self._cut

    def cut(self) -> bool:
        """Reset both sides at once (SO_LINGER 0, then close: each peer reads ``ECONNRESET``).

        Returns ``False`` when the connection had already ended. Does not block.
        """
        with self._lock:
            if self.ended.is_set():
                return False
            self._cut = True
            for sock in (self.client, self.server):
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
                # SHUT_RD sends nothing but wakes the pump blocked in recv(),
                # so close() below releases the socket (and sends RST) now.
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RD)
            self._close()
        return True

    def half_close(self, toward: str = "client") -> bool:
        """Send FIN to one side only (``"client"`` or ``"server"``); the other stays open.

        The side told reads end-of-stream; bytes the other side sends are
        still forwarded. Returns ``False`` when the connection had ended.
        """
        if toward not in ("client", "server"):
            raise ValueError(f"toward must be 'client' or 'server', not {toward!r}")
        if self.ended.is_set():
            return False
        sock = self.client if toward == "client" else self.server
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            return False
        return True

    def _eof(self) -> bool:
        """One direction ended; ``True`` when both have (the connection is over)."""
        with self._lock:
            self._eofs += 1
            return self._eofs >= 2

    def end(self) -> None:
        """Close both sockets gracefully (the proxy's close, or a pump that ended)."""
        with self._lock:
            if self.ended.is_set():
                return
            for sock in (self.client, self.server):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self._close()

    def _close(self) -> None:
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.close()
        self.ended.set()


class FaultProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target`` and injects faults on command.

    ``piece_size`` (bytes, 0: as read) splits what the server sends into
    pieces, ``gap`` (seconds) pauses after each piece. Faults apply to every
    connection, current and future, until changed; :meth:`cut` and
    :meth:`half_close` act on the current ones. Every method returns at once
    and may be called from any thread or greenlet.

    Constructing opens nothing: :meth:`start` listens (a free port, see
    :attr:`address`) and :meth:`close` stops every thread and socket. Each
    connection gets a pair of forwarding threads.
    """

    def __init__(self, target: str, piece_size: int = 0, gap: float = 0.0) -> None:
        if piece_size < 0:
            raise ValueError(f"piece_size must be 0 (as read) or more, not {piece_size!r}")
        if gap < 0:
            raise ValueError(f"gap must be 0 s or more, not {gap!r}")
        host, _, port = target.rpartition(":")
        self.target = (host or _HOST, int(port))
        self.piece_size = piece_size
        self.gap = gap
        self.pieces_sent = 0
        #: How many connections were accepted, and how many :meth:`cut` reset.
        self.accepted = 0
        self.cuts = 0
        self._latency = 0.0
        self._flowing = threading.Event()
        self._flowing.set()
        self._connections: list[ProxiedConnection] = []
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()

    @property
    def address(self) -> str:
        """``"127.0.0.1:port"`` for the client (known once started)."""
        if self._listener is None:
            raise RuntimeError(f"{type(self).__name__}.address is known once start() has run")
        return f"{_HOST}:{self._listener.getsockname()[1]}"

    @property
    def connections(self) -> list[ProxiedConnection]:
        """The connections that have not ended yet, oldest first."""
        with self._lock:
            return [c for c in self._connections if not c.ended.is_set()]

    # -- faults ---------------------------------------------------------------

    def delay(self, seconds: float) -> None:
        """Hold every chunk ``seconds`` before forwarding it, both ways (0: no delay)."""
        if seconds < 0:
            raise ValueError(f"delay must be 0 s or more, not {seconds!r}")
        self._latency = seconds

    def stall(self) -> None:
        """Stop forwarding, both ways, without closing anything (a hung network path).

        What arrives meanwhile is held (then TCP's buffers fill); :meth:`resume`
        delivers it. A client with heartbeats notices the silence itself.
        """
        self._flowing.clear()

    def resume(self) -> None:
        """Forward again after :meth:`stall`."""
        self._flowing.set()

    @property
    def stalled(self) -> bool:
        """True between :meth:`stall` and :meth:`resume`."""
        return not self._flowing.is_set()

    def cut(self) -> int:
        """Reset every current connection (RST to client and server); returns how many."""
        count = sum(conn.cut() for conn in self.connections)
        with self._lock:
            self.cuts += count
        return count

    def half_close(self, toward: str = "client") -> int:
        """FIN toward one side of every current connection; returns how many.

        ``"client"``: the client reads end-of-stream while nsqd still thinks
        it is connected; ``"server"``: nsqd reads it (and closes its side).
        """
        return sum(conn.half_close(toward) for conn in self.connections)

    # -- life -----------------------------------------------------------------

    def start(self) -> FaultProxy:
        """Listen and start accepting; returns at once."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((_HOST, 0))
        listener.listen(64)
        self._listener = listener
        self._spawn(self._accept_loop, listener)
        return self

    def close(self) -> None:
        """Close every socket and wait (at most 5 s) for the threads to end."""
        self._closed.set()
        self._flowing.set()
        with self._lock:
            listener, conns, threads = self._listener, list(self._connections), list(self._threads)
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                listener.close()
        for conn in conns:
            conn.end()
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(5.0)

    def __enter__(self) -> FaultProxy:
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
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def _accept_loop(self, listener: socket.socket) -> None:
        while not self._closed.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5.0)
            except OSError:
                # The server is down: the client sees its connection refused.
                with contextlib.suppress(OSError):
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
                client.close()
                continue
            server.settimeout(None)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self.accepted += 1
                conn = ProxiedConnection(self.accepted, client, server)
                self._connections = [c for c in self._connections if not c.ended.is_set()]
                self._connections.append(conn)
            self._spawn(self._pump, conn, client, server, 0)
            self._spawn(self._pump, conn, server, client, self.piece_size)

    def _gate(self, conn: ProxiedConnection) -> bool:
        """Wait while stalled, then for the latency; ``False`` if the connection ended."""
        while not self._flowing.wait(_POLL):
            if conn.ended.is_set():
                return False
        if self._latency:
            time.sleep(self._latency)
        return not conn.ended.is_set()

    def _pump(
        self, conn: ProxiedConnection, source: socket.socket, sink: socket.socket, piece_size: int
    ) -> None:
        """Copy ``source`` to ``sink`` (in pieces when ``piece_size``) until either ends."""
        try:
            while True:
                data = source.recv(_RECV_SIZE)
                if not data or not self._gate(conn) or conn.was_cut:
                    break
                if not piece_size:
                    sink.sendall(data)
                    continue
                for start in range(0, len(data), piece_size):
                    sink.sendall(data[start : start + piece_size])
                    self.pieces_sent += 1
                    time.sleep(self.gap)
        except OSError:
            # The other side is gone: end this connection, as a router would.
            conn.end()
            return
        if conn.was_cut or conn.ended.is_set():
            return
        # End-of-stream from source: pass it on; the other pump keeps going.
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            conn.end()
            return
        if conn._eof():
            conn.end()


class PieceProxy(FaultProxy):
    """A :class:`FaultProxy` whose server bytes leave ``piece_size`` at a time.

    ``gap`` (seconds) is the pause after each piece, long enough for the
    client to read it on its own. The client's bytes go to the server unchanged.
    """

    def __init__(self, target: str, piece_size: int = 3, gap: float = 0.001) -> None:
        if piece_size < 1:
            raise ValueError(f"piece_size must be 1 or more, not {piece_size!r}")
        super().__init__(target, piece_size, gap)

    def __enter__(self) -> PieceProxy:
        self.start()
        return self
