"""nsqlookupd's HTTP API as a WSGI application (served by gevent.pywsgi).

``/ping``, ``/info``, ``/lookup``, ``/topics``, ``/channels``, ``/nodes`` and
the POST actions ``/topic/create``, ``/topic/delete``, ``/channel/create``,
``/channel/delete`` and ``/topic/tombstone``, answering the v1.x JSON bodies
(errors are ``{"message": "TOPIC_NOT_FOUND"}`` with the matching status).

:class:`LookupdHttp` queries the
:class:`~gnsqlite.broker.lookupd_db.RegistrationDB` below it; what it needs
from the server above (its version and timeouts) is the :class:`ServerSettings`
protocol.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, Protocol
from urllib.parse import parse_qs

from ..protocol import valid_channel_name, valid_topic_name
from .lookupd_db import RegisteredNsqd, Registration, RegistrationDB

__all__ = ["LookupdHttp", "ServerSettings"]

StartResponse = Callable[..., Any]


class ServerSettings(Protocol):
    """What the HTTP answers need from the lookupd server (durations in seconds)."""

    version: str
    inactive_producer_timeout: float
    tombstone_lifetime: float


class _HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(f"{status} {message}")


_STATUS_TEXT = {
    200: "200 OK",
    400: "400 Bad Request",
    404: "404 Not Found",
    405: "405 Method Not Allowed",
    500: "500 Internal Server Error",
}


def _param(params: dict[str, list[str]], name: str, missing: str) -> str:
    values = params.get(name)
    if not values:
        raise _HTTPError(400, missing)
    return values[0]


def _topic_channel_args(params: dict[str, list[str]]) -> tuple[str, str]:
    topic = _param(params, "topic", "MISSING_ARG_TOPIC")
    if not valid_topic_name(topic):
        raise _HTTPError(400, "INVALID_ARG_TOPIC")
    channel = _param(params, "channel", "MISSING_ARG_CHANNEL")
    if not valid_channel_name(channel):
        raise _HTTPError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


class LookupdHttp:
    """The WSGI application of one lookupd; ``clock`` returns seconds."""

    def __init__(
        self, db: RegistrationDB, server: ServerSettings, clock: Callable[[], float]
    ) -> None:
        self.db = db
        self._server = server
        self._clock = clock

    # read from the server on each use: it learns its ports (and may be retuned) after this
    @property
    def version(self) -> str:
        return self._server.version

    @property
    def inactive_producer_timeout(self) -> float:
        return self._server.inactive_producer_timeout

    @property
    def tombstone_lifetime(self) -> float:
        return self._server.tombstone_lifetime

    def _active(
        self, producers: Iterable[RegisteredNsqd], tombstone_lifetime: float
    ) -> list[RegisteredNsqd]:
        now = self._clock()
        return [
            p
            for p in producers
            if now - p.peer.last_update <= self.inactive_producer_timeout
            and not p.is_tombstoned(now, tombstone_lifetime)
        ]

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/")
        params = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        route = _ROUTES.get(path)
        body: bytes
        content_type = "application/json; charset=utf-8"
        try:
            if route is None:
                raise _HTTPError(404, "NOT_FOUND")
            allowed, handler = route
            if method != allowed:  # httprouter maps no HEAD to GET: 405 like nsqlookupd
                raise _HTTPError(405, "METHOD_NOT_ALLOWED")
            result = handler(self, params)
            status = 200
            if result is None:
                body, content_type = b"", ""
            elif isinstance(result, str):
                body, content_type = result.encode(), "text/plain; charset=utf-8"
            else:
                body = json.dumps(result).encode()
        except _HTTPError as exc:
            status = exc.status
            body = json.dumps({"message": exc.message}).encode()
        headers = [("Content-Length", str(len(body)))]
        if path != "/ping" or status != 200:  # nsqlookupd's /ping is PlainText: no such header
            headers.append(("X-NSQ-Content-Type", "nsq; version=1.0"))
        if content_type:
            headers.append(("Content-Type", content_type))
        start_response(_STATUS_TEXT.get(status, f"{status} Error"), headers)
        return [body]

    def _http_ping(self, params: dict[str, list[str]]) -> str:
        return "OK"

    def _http_info(self, params: dict[str, list[str]]) -> dict[str, Any]:
        return {"version": self.version}

    def _http_topics(self, params: dict[str, list[str]]) -> dict[str, Any]:
        return {"topics": [k.key for k in self.db.find_registrations("topic", "*", "")]}

    def _http_channels(self, params: dict[str, list[str]]) -> dict[str, Any]:
        topic = _param(params, "topic", "MISSING_ARG_TOPIC")
        keys = self.db.find_registrations("channel", topic, "*")
        return {"channels": [k.subkey for k in keys]}

    def _http_lookup(self, params: dict[str, list[str]]) -> dict[str, Any]:
        topic = _param(params, "topic", "MISSING_ARG_TOPIC")
        if not self.db.find_registrations("topic", topic, ""):
            raise _HTTPError(404, "TOPIC_NOT_FOUND")
        channels = [k.subkey for k in self.db.find_registrations("channel", topic, "*")]
        producers = self._active(
            self.db.find_producers("topic", topic, ""), self.tombstone_lifetime
        )
        return {"channels": channels, "producers": [p.peer.as_json() for p in producers]}

    def _http_nodes(self, params: dict[str, list[str]]) -> dict[str, Any]:
        nodes = []
        for client in self._active(self.db.find_producers("client", "", ""), 0.0):
            peer = client.peer
            topics = [
                k.key for k in self.db.lookup_registrations(peer.id) if k.matches("topic", "*", "")
            ]
            now = self._clock()
            tombstones = []
            for topic in topics:
                producer = next(
                    (p for p in self.db.find_producers("topic", topic, "") if p.peer is peer),
                    None,
                )
                tombstones.append(
                    producer is not None and producer.is_tombstoned(now, self.tombstone_lifetime)
                )
            node = peer.as_json()
            node["tombstones"] = tombstones
            node["topics"] = topics
            nodes.append(node)
        return {"producers": nodes}

    def _http_topic_create(self, params: dict[str, list[str]]) -> None:
        topic = _param(params, "topic", "MISSING_ARG_TOPIC")
        if not valid_topic_name(topic):
            raise _HTTPError(400, "INVALID_ARG_TOPIC")
        self.db.add_registration(Registration("topic", topic, ""))

    def _http_topic_delete(self, params: dict[str, list[str]]) -> None:
        topic = _param(params, "topic", "MISSING_ARG_TOPIC")
        for key in self.db.find_registrations("channel", topic, "*"):
            self.db.remove_registration(key)
        for key in self.db.find_registrations("topic", topic, ""):
            self.db.remove_registration(key)

    def _http_topic_tombstone(self, params: dict[str, list[str]]) -> None:
        topic = _param(params, "topic", "MISSING_ARG_TOPIC")
        node = _param(params, "node", "MISSING_ARG_NODE")
        now = self._clock()
        for producer in self.db.find_producers("topic", topic, ""):
            if f"{producer.peer.broadcast_address}:{producer.peer.http_port}" == node:
                producer.tombstoned_at = now

    def _http_channel_create(self, params: dict[str, list[str]]) -> None:
        topic, channel = _topic_channel_args(params)
        self.db.add_registration(Registration("channel", topic, channel))
        self.db.add_registration(Registration("topic", topic, ""))

    def _http_channel_delete(self, params: dict[str, list[str]]) -> None:
        topic, channel = _topic_channel_args(params)
        keys = self.db.find_registrations("channel", topic, channel)
        if not keys:
            raise _HTTPError(404, "CHANNEL_NOT_FOUND")
        for key in keys:
            self.db.remove_registration(key)


_Handler = Callable[[LookupdHttp, dict[str, list[str]]], Any]
_ROUTES: dict[str, tuple[str, _Handler]] = {
    "/ping": ("GET", LookupdHttp._http_ping),
    "/info": ("GET", LookupdHttp._http_info),
    "/topics": ("GET", LookupdHttp._http_topics),
    "/channels": ("GET", LookupdHttp._http_channels),
    "/lookup": ("GET", LookupdHttp._http_lookup),
    "/nodes": ("GET", LookupdHttp._http_nodes),
    "/topic/create": ("POST", LookupdHttp._http_topic_create),
    "/topic/delete": ("POST", LookupdHttp._http_topic_delete),
    "/topic/tombstone": ("POST", LookupdHttp._http_topic_tombstone),
    "/channel/create": ("POST", LookupdHttp._http_channel_create),
    "/channel/delete": ("POST", LookupdHttp._http_channel_delete),
}
