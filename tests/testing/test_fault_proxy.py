"""FaultProxy: each fault does to a plain TCP client what it says (an echo server behind it)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from gnsqlite.testing import FaultProxy, PieceProxy, wait_until
from gnsqlite.testing.faults import rss_bytes
from gnsqlite.testing.proxy_process import ProxyProcess


@pytest.fixture
def echo() -> Iterator[str]:
    """A threaded echo server on 127.0.0.1; yields its address."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    peers: list[socket.socket] = []

    def serve(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := sock.recv(4096):
                sock.sendall(data)
        with contextlib.suppress(OSError):
            sock.close()

    def accept() -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            peers.append(sock)
            threading.Thread(target=serve, args=(sock,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    listener.close()
    for sock in peers:
        with contextlib.suppress(OSError):
            sock.close()


def dial(proxy: FaultProxy | ProxyProcess) -> socket.socket:
    host, port = proxy.address.split(":")
    sock = socket.create_connection((host, int(port)), timeout=5.0)
    if isinstance(proxy, FaultProxy):
        wait_until(lambda: proxy.connections, timeout=5, message="proxy accepted")
    else:  # a round trip proves the child accepted and forwards
        sock.sendall(b"hi")
        assert sock.recv(100) == b"hi"
    return sock


def test_forwards_and_cuts_with_a_reset(
    fault_proxy: Callable[[str], FaultProxy], echo: str
) -> None:
    proxy = fault_proxy(echo)
    sock = dial(proxy)
    sock.sendall(b"hello")
    assert sock.recv(100) == b"hello"
    assert proxy.cut() == 1
    with pytest.raises(ConnectionResetError):
        sock.sendall(b"x")
        sock.recv(100)
    assert proxy.cuts == 1 and proxy.connections == []
    sock.close()


def test_half_close_toward_client_is_end_of_stream(
    fault_proxy: Callable[[str], FaultProxy], echo: str
) -> None:
    proxy = fault_proxy(echo)
    sock = dial(proxy)
    assert proxy.half_close("client") == 1
    assert sock.recv(100) == b""
    with pytest.raises(ValueError, match="toward must be"):
        proxy.half_close("sideways")
    sock.close()


def test_stall_holds_bytes_until_resume_and_delay_adds_latency(
    fault_proxy: Callable[[str], FaultProxy], echo: str
) -> None:
    proxy = fault_proxy(echo)
    sock = dial(proxy)
    stall_then_delay(proxy, sock)
    sock.close()


def stall_then_delay(proxy: FaultProxy | ProxyProcess, sock: socket.socket) -> None:
    """A stall holds bytes until resume(); a delay holds each chunk, once each way."""
    proxy.stall()
    sock.sendall(b"held")
    sock.settimeout(0.3)
    with pytest.raises(TimeoutError):
        sock.recv(100)
    proxy.resume()
    sock.settimeout(5.0)
    assert sock.recv(100) == b"held"
    proxy.delay(0.2)
    started = time.monotonic()
    sock.sendall(b"late")
    assert sock.recv(100) == b"late"
    assert time.monotonic() - started >= 0.4  # held once each way


def test_refused_when_the_server_is_down() -> None:
    spare = socket.socket()
    spare.bind(("127.0.0.1", 0))
    address = f"127.0.0.1:{spare.getsockname()[1]}"
    spare.close()  # nothing listens there now
    with FaultProxy(address) as proxy:
        host, port = proxy.address.split(":")
        # the reset may reach the client before its connect() has returned, or after
        with (
            pytest.raises((ConnectionResetError, ConnectionAbortedError)),
            socket.create_connection((host, int(port)), timeout=5.0) as sock,
        ):
            if sock.recv(100) == b"":
                raise ConnectionAbortedError("closed")
        assert proxy.accepted == 0


def test_piece_proxy_still_validates() -> None:
    with pytest.raises(ValueError, match="piece_size must be 1 or more"):
        PieceProxy("127.0.0.1:1", piece_size=0)
    with pytest.raises(ValueError, match="delay must be 0 s or more"):
        FaultProxy("127.0.0.1:1").delay(-1)


def test_proxy_process_applies_each_fault_in_its_child(echo: str) -> None:
    """The soak's proxies run out of its process: same faults, none of its memory."""
    with ProxyProcess(echo) as proxy:
        assert proxy.pid is not None and proxy.rss_bytes() > 0
        sock = dial(proxy)
        stall_then_delay(proxy, sock)
        proxy.delay(0.0)
        assert proxy.cut() == 1
        with pytest.raises(ConnectionResetError):
            sock.sendall(b"x")
            sock.recv(100)
        sock.close()
        other = dial(proxy)
        assert proxy.half_close("client") == 1
        assert other.recv(100) == b""
        other.close()
        with pytest.raises(ValueError, match="toward must be"):
            proxy.half_close("sideways")
        with pytest.raises(ValueError, match="delay must be 0 s or more"):
            proxy.delay(-1)
        assert rss_bytes() > 0
    with pytest.raises(RuntimeError, match="not running"):
        proxy.cut()
