"""Opening TCP connections (``gnsqlite.net.connect_tcp``): IP addresses need no name lookup.

gevent's default resolver runs ``getaddrinfo`` in a thread pool that it
starts on the first lookup; a client told an IP address must not start it.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from gnsqlite.net import connect_tcp, ip_family


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A listening socket on 127.0.0.1: its backlog completes a connect without accept()."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server
    server.close()


def test_a_producer_and_a_consumer_given_ip_addresses_start_no_thread(nsqd: Any) -> None:
    # A fresh process: the test process's hub may have made a lookup already.
    code = textwrap.dedent(
        f"""
        import os, sys
        import gevent.event
        from gnsqlite import Consumer, Producer

        with Producer({nsqd.tcp_address!r}) as producer:
            producer.publish("no_lookup", b"hello")
        got = gevent.event.AsyncResult()
        consumer = Consumer("no_lookup", "ch", lambda message: got.set(message.body),
                            nsqd_tcp_addresses=[{nsqd.tcp_address!r}])
        consumer.start()
        body = got.get(timeout=10)
        consumer.close()
        print(body.decode(), len(os.listdir("/proc/self/task")),
              "gevent.resolver.thread" in sys.modules)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    body, threads, resolver = done.stdout.decode().split()
    assert body == "hello"
    assert (threads, resolver) == ("1", "False"), "a name lookup started gevent's thread pool"


def test_ip_addresses_are_told_from_names() -> None:
    assert ip_family("127.0.0.1") == socket.AF_INET
    assert ip_family("::1") == socket.AF_INET6
    assert ip_family("localhost") is None
    assert ip_family("fe80::1%eth0") is None  # a zone: the resolver's job
    assert ip_family("300.1.1.1") is None


def test_connect_tcp_connects_to_an_address_and_to_a_name(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    for host in ("127.0.0.1", "localhost"):
        sock = connect_tcp((host, port), 5.0)
        try:
            assert sock.getpeername()[1] == port
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
            assert sock.gettimeout() == 5.0  # kept, as create_connection keeps it
        finally:
            sock.close()


def test_connect_tcp_to_a_closed_port_raises_connection_refused(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    listener.close()
    with pytest.raises(ConnectionRefusedError):
        connect_tcp(("127.0.0.1", port), 5.0)
