"""One HTTP request over a gevent socket: the transport nsqd's HTTP clients and the broker share.

:func:`http_request` sends one request to ``"host:port"`` and returns the
body; it blocks only the calling greenlet (the socket is made by
:func:`gnsqlite.net.connect_tcp`, a gevent socket, whether or not the process
is patched). :mod:`gnsqlite.http`'s clients for nsqd and nsqlookupd are built
on it, and so are the embedded broker's queries to auth servers and lookupd
(which is why it is not in :mod:`gnsqlite.http`: the broker imports nothing
of the client side). Errors: :class:`HTTPError` for a non-2xx status,
:class:`~gnsqlite.errors.NSQTimeoutError`,
:class:`~gnsqlite.errors.BrokenConnectionError`, and
:class:`~gnsqlite.errors.WrongPortError` when the port answers in NSQ's TCP
protocol.
"""

from __future__ import annotations

import http.client
import json
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import gevent

from .errors import BrokenConnectionError, NSQError, NSQTimeoutError, WrongPortError
from .net import connect_tcp, parse_address
from .protocol.ports import tcp_answer_on_http_port

__all__ = ["HTTPError", "http_request"]

log = logging.getLogger(__name__)

#: Asks nsqd (0.3.x) for the v1 response shapes; newer versions ignore it.
_HEADERS = {"Accept": "application/vnd.nsq; version=1.0"}


class HTTPError(NSQError):
    """nsqd or nsqlookupd answered with a non-2xx status."""

    def __init__(self, address: str, status: int, body: bytes) -> None:
        self.address = address
        self.status = status
        self.body = body
        message = body.decode("utf-8", "replace").strip()
        try:
            decoded = json.loads(body)
            if isinstance(decoded, dict):
                message = str(decoded.get("message") or decoded.get("status_txt") or message)
        except ValueError:
            pass
        self.message = message
        super().__init__(f"{address}: HTTP {status}: {message}")


class _GeventHTTPConnection(http.client.HTTPConnection):
    """An HTTPConnection whose socket is a gevent socket."""

    def connect(self) -> None:
        self.sock = connect_tcp((self.host, self.port), self.timeout)


def http_request(
    address: str,
    method: str,
    path: str,
    params: Mapping[str, Any] | None = None,
    body: bytes | None = None,
    timeout: float = 5.0,
    connect_timeout: float | None = None,
) -> bytes:
    """One HTTP request to ``address`` (``"host:port"``); returns the body.

    Blocks the calling greenlet up to ``timeout`` seconds in all (connect,
    send and the whole answer); ``connect_timeout``, when given, bounds the
    TCP connect alone (like Go's dialer timeout beside the client's). Raises
    :class:`HTTPError` for a non-2xx status,
    :class:`~gnsqlite.errors.NSQTimeoutError` on timeout and
    :class:`~gnsqlite.errors.BrokenConnectionError` on network failure.
    """
    host, port = parse_address(address)
    url = path
    if params:
        url += "?" + urlencode({k: v for k, v in params.items() if v is not None})
    # The query string is not logged: the auth server's carries a secret.
    log.debug("%s %s%s", method, address, path)
    connect_limit = timeout if connect_timeout is None else min(timeout, connect_timeout)
    conn = _GeventHTTPConnection(host, port, timeout=connect_limit)
    deadline = gevent.Timeout(timeout)  # bounds the total, not only each socket call
    deadline.start()
    failure: Exception | None = None
    try:
        if connect_limit < timeout:
            conn.connect()
            conn.sock.settimeout(timeout)
            conn.timeout = timeout
        conn.request(method, url, body=body, headers=_HEADERS)
        response = conn.getresponse()
        data = response.read()
    except gevent.Timeout as exc:
        if exc is not deadline:
            raise
        raise NSQTimeoutError(f"{address}: {method} {path} took longer than {timeout} s") from None
    except TimeoutError as exc:
        raise NSQTimeoutError(f"{address}: {method} {path} took longer than {timeout} s") from exc
    except (OSError, http.client.HTTPException) as exc:
        failure = exc
    finally:
        deadline.close()
        conn.close()
    if failure is not None:
        hint = _nsq_tcp_port_hint(failure, (host, port), connect_limit)
        if hint is not None:
            raise WrongPortError(f"{address}: {hint}") from failure
        raise BrokenConnectionError(address, f"{method} {path} failed: {failure}") from failure
    if not 200 <= response.status < 300:
        raise HTTPError(address, response.status, data)
    return data


def _nsq_tcp_port_hint(failure: Exception, address: tuple[str, int], timeout: float) -> str | None:
    """When a request got no HTTP answer: what to say if ``address`` is an NSQ TCP port.

    nsqd and nsqlookupd read four bytes of protocol magic, answer
    ``E_BAD_PROTOCOL`` and close. With the rest of the request unread that
    close is a reset, which can beat the answer: then the same four bytes are
    sent alone and the answer read until the server closes (it may come in
    pieces: nsqd writes the frame's size, type and text separately); blocks
    up to ``timeout`` seconds per read. ``None`` when the server is no NSQ TCP port.
    """
    line = str(failure.args[0]) if failure.args else ""  # BadStatusLine's, in latin-1
    if isinstance(failure, http.client.BadStatusLine) and line:
        return tcp_answer_on_http_port(line.encode("latin-1", "replace"))
    if not isinstance(failure, ConnectionResetError):  # RemoteDisconnected included
        return None
    try:
        sock = connect_tcp(address, timeout)
        try:
            sock.settimeout(timeout)
            sock.sendall(b"GET ")
            answer = b""
            while len(answer) < 64:  # nsqd writes size, type and text as three writes
                chunk = sock.recv(64 - len(answer))
                if not chunk:
                    break
                answer += chunk
        finally:
            sock.close()
    except OSError:
        return None
    return tcp_answer_on_http_port(answer)
