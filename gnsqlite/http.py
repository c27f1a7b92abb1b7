"""HTTP clients for nsqd and nsqlookupd, cooperative without monkey-patching.

:class:`NsqdHTTPClient` covers nsqd's API (``pub``, ``mpub``, ``stats``,
``ping``, ``info``, and creating, deleting, emptying, pausing and unpausing
topics and channels); :class:`LookupdClient` covers nsqlookupd's
(``lookup``, ``topics``, ``channels``, ``nodes``).

They are built on the standard library's :mod:`http.client`, with its socket
made by :func:`gnsqlite.net.connect_tcp` (a gevent socket): a request blocks only the
calling greenlet, whether or not the process is patched. Why not a library
such as ``geventhttpclient``: the core's runtime dependencies are gevent and
python-snappy only, and these APIs are a handful of small requests to one
host (a short GET or POST, a JSON or ``OK`` answer, no redirects, cookies,
TLS or streaming), which :mod:`http.client` does fully and is maintained
with Python itself. ``geventhttpclient`` would add a compiled dependency
(and its certifi/brotli requirements) for connection pooling we do not need.

Every client takes a ``timeout`` in seconds bounding each request. Responses
are accepted in both shapes nsqd has used: the v1.x bodies, and the older
ones wrapped as ``{"status_code": 200, "status_txt": "OK", "data": ...}``.
A non-2xx answer (in the HTTP status, or in an old-style ``status_code``)
raises :class:`HTTPError` carrying the status and body; network failures
raise :class:`~gnsqlite.errors.BrokenConnectionError` and timeouts
:class:`~gnsqlite.errors.NSQTimeoutError`, both naming the address; an
answer in NSQ's TCP protocol (a TCP port given for the HTTP one) raises
:class:`~gnsqlite.errors.WrongPortError` naming the port to give.
"""

from __future__ import annotations

import http.client
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlencode

import gevent

from .errors import (
    BrokenConnectionError,
    ConfigError,
    NSQError,
    NSQTimeoutError,
    RemoteProtocolError,
    WrongPortError,
)
from .net import connect_tcp, parse_address
from .protocol import as_body, check_channel_name, check_topic_name, to_milliseconds
from .protocol.ports import tcp_answer_on_http_port

__all__ = ["HTTPError", "NsqdHTTPClient", "LookupdClient", "http_request"]

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


def _nsq_tcp_port_hint(
    failure: Exception, address: tuple[str, int], timeout: float
) -> str | None:
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


def _unwrap(address: str, data: bytes) -> Any:
    """Decode a JSON answer, unwrapping the pre-1.0 ``{"status_code", "data"}`` shape.

    Raises :class:`HTTPError` when the old shape carries a non-2xx
    ``status_code``, and :class:`~gnsqlite.errors.RemoteProtocolError` when
    the body is not JSON.
    """
    try:
        decoded = json.loads(data) if data.strip() else None
    except ValueError as exc:
        raise RemoteProtocolError(f"{address}: the answer is not JSON: {data[:80]!r}") from exc
    if isinstance(decoded, dict) and "status_code" in decoded and "data" in decoded:
        status = decoded["status_code"]
        if isinstance(status, int) and not 200 <= status < 300:
            raise HTTPError(address, status, data)
        return decoded["data"]
    return decoded


class _Client:
    def __init__(self, address: str, timeout: float = 5.0) -> None:
        try:
            parse_address(address)  # validate early; opens nothing
        except ValueError as exc:
            raise ConfigError(f"address: {exc}") from None
        if not timeout > 0:
            raise ConfigError(f"timeout={timeout!r} is out of range: use more than 0 seconds")
        self.address = address
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.address}>"

    def _get(self, path: str, **params: Any) -> bytes:
        return http_request(self.address, "GET", path, params, timeout=self.timeout)

    def _post(self, path: str, body: bytes | None = None, **params: Any) -> bytes:
        return http_request(self.address, "POST", path, params, body, timeout=self.timeout)

    def _json(self, path: str, **params: Any) -> Any:
        return _unwrap(self.address, self._get(path, **params))

    def ping(self) -> bool:
        """``True`` when ``/ping`` answers 200; raises on failure."""
        self._get("/ping")
        return True

    def info(self) -> dict[str, Any]:
        """The ``/info`` document (version, ports, ...)."""
        result: dict[str, Any] = self._json("/info")
        return result


class NsqdHTTPClient(_Client):
    """nsqd's HTTP API at ``address`` (``"host:port"``, usually port 4151).

    Every method blocks the calling greenlet up to ``timeout`` seconds.
    """

    def pub(self, topic: str, body: bytes | str, defer: float | None = None) -> None:
        """Publish one message; ``defer`` is a delay in seconds."""
        params: dict[str, Any] = {"topic": check_topic_name(topic)}
        if defer is not None:
            params["defer"] = to_milliseconds(defer, "defer")
        self._post("/pub", as_body(body), **params)

    def mpub(self, topic: str, bodies: Iterable[bytes | str], binary: bool = True) -> None:
        """Publish a batch; ``binary`` uses the size-prefixed form, else newline-separated."""
        raws = [as_body(b) for b in bodies]
        if binary:
            payload = len(raws).to_bytes(4, "big") + b"".join(
                len(r).to_bytes(4, "big") + r for r in raws
            )
            self._post("/mpub", payload, topic=check_topic_name(topic), binary="true")
        else:
            if any(b"\n" in r for r in raws):
                raise ValueError("a body contains a newline: use binary=True")
            self._post("/mpub", b"\n".join(raws), topic=check_topic_name(topic))

    def stats(self, topic: str | None = None, channel: str | None = None) -> dict[str, Any]:
        """``/stats?format=json``, optionally filtered to a topic and channel."""
        result: dict[str, Any] = self._json("/stats", format="json", topic=topic, channel=channel)
        return result

    def create_topic(self, topic: str) -> None:
        """Create ``topic``."""
        self._post("/topic/create", topic=check_topic_name(topic))

    def delete_topic(self, topic: str) -> None:
        """Delete ``topic`` and its channels."""
        self._post("/topic/delete", topic=check_topic_name(topic))

    def empty_topic(self, topic: str) -> None:
        """Drop the messages queued in ``topic``."""
        self._post("/topic/empty", topic=check_topic_name(topic))

    def pause_topic(self, topic: str) -> None:
        """Stop ``topic`` from passing messages to its channels."""
        self._post("/topic/pause", topic=check_topic_name(topic))

    def unpause_topic(self, topic: str) -> None:
        """Resume ``topic``."""
        self._post("/topic/unpause", topic=check_topic_name(topic))

    def _channel(self, action: str, topic: str, channel: str) -> None:
        self._post(
            f"/channel/{action}",
            topic=check_topic_name(topic),
            channel=check_channel_name(channel),
        )

    def create_channel(self, topic: str, channel: str) -> None:
        """Create ``channel`` on ``topic``."""
        self._channel("create", topic, channel)

    def delete_channel(self, topic: str, channel: str) -> None:
        """Delete ``channel``."""
        self._channel("delete", topic, channel)

    def empty_channel(self, topic: str, channel: str) -> None:
        """Drop the messages queued in ``channel``."""
        self._channel("empty", topic, channel)

    def pause_channel(self, topic: str, channel: str) -> None:
        """Stop delivery from ``channel``."""
        self._channel("pause", topic, channel)

    def unpause_channel(self, topic: str, channel: str) -> None:
        """Resume delivery from ``channel``."""
        self._channel("unpause", topic, channel)


class LookupdClient(_Client):
    """nsqlookupd's HTTP API at ``address`` (``"host:port"``, usually port 4161).

    Every method blocks the calling greenlet up to ``timeout`` seconds.
    """

    def lookup(self, topic: str) -> dict[str, Any]:
        """``{"channels": [...], "producers": [...]}`` for ``topic``.

        An unknown topic gives an empty result (nsqlookupd answers 404).
        """
        try:
            result: dict[str, Any] = self._json("/lookup", topic=check_topic_name(topic))
        except HTTPError as exc:
            if exc.status == 404:
                return {"channels": [], "producers": []}
            raise
        return result

    def producer_addresses(self, topic: str) -> list[str]:
        """The ``broadcast_address:tcp_port`` of each nsqd that has ``topic``."""
        return [
            f"{p['broadcast_address']}:{p['tcp_port']}"
            for p in self.lookup(topic).get("producers", [])
        ]

    def topics(self) -> list[str]:
        """Every topic lookupd knows."""
        return list(self._json("/topics").get("topics", []))

    def channels(self, topic: str) -> list[str]:
        """Every channel of ``topic``."""
        return list(self._json("/channels", topic=check_topic_name(topic)).get("channels", []))

    def nodes(self) -> list[dict[str, Any]]:
        """Every nsqd registered with lookupd."""
        return list(self._json("/nodes").get("producers", []))
