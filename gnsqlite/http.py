"""HTTP clients for nsqd and nsqlookupd, cooperative without monkey-patching.

:class:`NsqdHTTPClient` covers nsqd's API (``pub``, ``mpub``, ``stats``,
``ping``, ``info``, and creating, deleting, emptying, pausing and unpausing
topics and channels); :class:`LookupdClient` covers nsqlookupd's
(``lookup``, ``topics``, ``channels``, ``nodes``).

They are built on :func:`gnsqlite.http_transport.http_request` (the standard
library's :mod:`http.client` over a gevent socket): a request blocks only the
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

import json
from collections.abc import Iterable
from typing import Any

from .errors import ConfigError, RemoteProtocolError
from .http_transport import HTTPError, http_request
from .net import parse_address
from .protocol import as_body, check_channel_name, check_topic_name, to_milliseconds
from .protocol.commands import Body

__all__ = ["HTTPError", "NsqdHTTPClient", "LookupdClient"]


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

    def pub(self, topic: str, body: Body, defer: float | None = None) -> None:
        """Publish one message; ``defer`` is a delay in seconds."""
        params: dict[str, Any] = {"topic": check_topic_name(topic)}
        if defer is not None:
            params["defer"] = to_milliseconds(defer, "defer")
        self._post("/pub", as_body(body), **params)

    def mpub(self, topic: str, bodies: Iterable[Body], binary: bool = True) -> None:
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
        return _tcp_addresses(self.lookup(topic).get("producers", []))

    def topics(self) -> list[str]:
        """Every topic lookupd knows."""
        return list(self._json("/topics").get("topics", []))

    def channels(self, topic: str) -> list[str]:
        """Every channel of ``topic``."""
        return list(self._json("/channels", topic=check_topic_name(topic)).get("channels", []))

    def nodes(self) -> list[dict[str, Any]]:
        """Every nsqd registered with lookupd."""
        return list(self._json("/nodes").get("producers", []))

    def node_addresses(self) -> list[str]:
        """The ``broadcast_address:tcp_port`` of every nsqd registered with lookupd."""
        return _tcp_addresses(self.nodes())


def _tcp_addresses(producers: Iterable[dict[str, Any]]) -> list[str]:
    """The ``broadcast_address:tcp_port`` of each producer record of lookupd's answers."""
    return [f"{p['broadcast_address']}:{p['tcp_port']}" for p in producers]
