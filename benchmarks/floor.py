"""The floor of the latency-bound workloads: their round trips with no client library.

Not a test; ``compare.py`` runs it as two extra columns of the sync PUB and
max_in_flight 1 rows, to show how much of a round trip any client can save:

* ``bare-gevent``: one greenlet writes the command with one ``send`` and
  waits for the answer on the socket through gevent's hub (an I/O watcher,
  then one ``recv``): the least a gevent client can do per round trip;
* ``bare-socket``: the same with a blocking stdlib socket and no event loop,
  which no gevent client can use (it would block every other greenlet);
* ``bare-handoff`` (max_in_flight 1 only): the structure the brief asks of a
  consumer and nothing else: a reader greenlet reads and splits frames and
  hands each message through a ``gevent.queue.Queue`` to a handler greenlet,
  which writes ``FIN``. No message object, no counting, no
  timers: what a reader greenlet plus a handler pool cost by themselves.

Both speak just enough of the protocol for the workload: ``PUB`` (or an
``MPUB`` of 100) waiting for each ``OK``, or ``SUB`` with ``RDY 1`` once and a
``FIN`` per message (nsqd's RDY is a window: the FIN reopens it, so gnsqlite
sends no RDY per message either; pynsq and gnsq send ``RDY 1`` again with every
``FIN``). Heartbeats are answered; anything else unexpected raises.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any

import gevent
import gevent.queue
import gevent.socket

_FRAME_RESPONSE, _FRAME_ERROR, _FRAME_MESSAGE = 0, 1, 2
_HEADER = struct.Struct(">ii")  # size, frame type
_HEARTBEAT = b"_heartbeat_"


class BareConnection:
    """One connection to nsqd with no library: write a command, read a frame.

    ``kind`` is ``"gevent"`` (a gevent socket; a read waits in the hub) or
    ``"socket"`` (a blocking stdlib socket). Reads block the caller.
    """

    def __init__(self, address: str, kind: str) -> None:
        host, port = address.rsplit(":", 1)
        if kind == "gevent":
            self.sock: Any = gevent.socket.create_connection((host, int(port)))
            hub = gevent.get_hub()
            watcher = hub.loop.io(self.sock.fileno(), 1)  # 1: readable
            self._wait: Callable[[], None] = lambda: hub.wait(watcher)
            self._recv: Callable[[int], bytes] = self.sock._sock.recv  # the OS socket: no retry
        elif kind == "socket":
            self.sock = socket.create_connection((host, int(port)))
            self._wait = lambda: None  # recv blocks by itself
            self._recv = self.sock.recv
        else:
            raise ValueError(f"kind must be 'gevent' or 'socket', not {kind!r}")
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = b""
        self.send(b"  V2")

    def send(self, data: bytes) -> None:
        """Write ``data`` (usually in one ``send``)."""
        while data:
            data = data[self.sock.send(data) :]

    def frame(self) -> tuple[int, bytes]:
        """The next frame that is not a heartbeat (a heartbeat is answered); blocks."""
        while True:
            while (
                len(self._buffer) < 8
                or len(self._buffer) < 4 + _HEADER.unpack_from(self._buffer)[0]
            ):
                self._wait()
                data = self._recv(65536)
                if not data:
                    raise ConnectionError("nsqd closed the connection")
                self._buffer += data
            size, kind = _HEADER.unpack_from(self._buffer)
            body, self._buffer = self._buffer[8 : 4 + size], self._buffer[4 + size :]
            if kind == _FRAME_RESPONSE and body == _HEARTBEAT:
                self.send(b"NOP\n")
                continue
            if kind == _FRAME_ERROR:
                raise RuntimeError(f"nsqd: {body.decode(errors='replace')}")
            return kind, body

    def close(self) -> None:
        self.sock.close()


def _kind(client: str) -> str:
    kind = client.split("-", 1)[1]  # "bare-gevent" -> "gevent"
    return "gevent" if kind == "handoff" else kind


def publish(client: str) -> Callable[..., float]:
    """``publish(address, topic, body, count, mode, options)``: seconds for ``count`` PUBs."""

    def run(
        address: str,
        topic: str,
        body: bytes,
        count: int,
        mode: str,
        options: Mapping[str, Any] | None = None,
    ) -> float:
        if mode not in ("sequential", "mpub") or options:
            raise ValueError("the floor runs only sequential PUB and MPUB on a plain connection")
        from gnsqlite.cli.bench import time_publishes

        conn = BareConnection(address, _kind(client))
        prefix = b"PUB %s\n" % topic.encode()
        mprefix = b"MPUB %s\n" % topic.encode()

        def answered(command: str) -> None:
            _, answer = conn.frame()
            if answer != b"OK":
                raise RuntimeError(f"{command} answered {answer!r}")

        def pub(topic: str, body: bytes) -> None:
            conn.send(prefix + struct.pack(">I", len(body)) + body)
            answered("PUB")

        def mpub(topic: str, bodies: list[bytes]) -> None:
            size = struct.pack(">I", len(bodies[0]))  # the workload's bodies are all one size
            payload = struct.pack(">I", len(bodies)) + size + size.join(bodies)
            conn.send(mprefix + struct.pack(">I", len(payload)) + payload)
            answered("MPUB")

        try:
            return time_publishes(pub, mpub, topic, body, count, mode)
        finally:
            conn.close()

    return run


def consume(client: str) -> Callable[..., float]:
    """``consume(address, topic, count, max_in_flight, options)``: seconds to handle ``count``."""

    def run(
        address: str,
        topic: str,
        count: int,
        max_in_flight: int,
        options: Mapping[str, Any] | None = None,
    ) -> float:
        if max_in_flight != 1 or options:
            raise ValueError("the floor runs only max_in_flight 1 on a plain connection")
        start = time.perf_counter()
        conn = BareConnection(address, _kind(client))
        try:
            conn.send(b"SUB %s bench\n" % topic.encode())
            if conn.frame() != (_FRAME_RESPONSE, b"OK"):
                raise RuntimeError("SUB was not answered OK")
            conn.send(b"RDY 1\n")
            if client == "bare-handoff":
                _handoff(conn, count)
                return time.perf_counter() - start
            handled = 0
            while handled < count:
                kind, body = conn.frame()
                if kind != _FRAME_MESSAGE:
                    raise RuntimeError(f"expected a message, got frame type {kind}")
                conn.send(b"FIN " + body[10:26] + b"\n")  # id: after timestamp, attempts
                handled += 1
            return time.perf_counter() - start
        finally:
            conn.close()

    return run


def _handoff(conn: BareConnection, count: int) -> None:
    """Handle ``count`` messages: a reader greenlet queues them, a handler answers. Blocks."""
    queue: gevent.queue.Queue[bytes] = gevent.queue.Queue()

    def read() -> None:
        while True:
            kind, body = conn.frame()
            if kind != _FRAME_MESSAGE:
                raise RuntimeError(f"expected a message, got frame type {kind}")
            queue.put(body)

    def handle() -> None:
        for _ in range(count):
            body = queue.get()
            conn.send(b"FIN " + body[10:26] + b"\n")  # id: after timestamp, attempts

    reader = gevent.spawn(read)
    try:
        gevent.spawn(handle).get()
    finally:
        reader.kill()
