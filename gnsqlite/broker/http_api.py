"""nsqd's HTTP API v1.x as a WSGI application (served by gevent.pywsgi).

Routes, methods, status codes and bodies follow nsqd's ``http.go``: success
answers ``OK`` (publishing), an empty body (administration) or JSON; errors
answer ``{"message": "MISSING_ARG_TOPIC"}`` with nsqd's status code. Every
response but ``/ping``'s carries ``X-NSQ-Content-Type: nsq; version=1.0`` like
nsqd's (``/ping`` goes through nsqd's ``PlainText`` decorator, which sets no
such header).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from ..errors import ServerError
from ..protocol.names import valid_channel_name, valid_topic_name
from ..protocol.server import split_mpub
from . import stats as stats_module
from .queues import Channel, Topic
from .state import BrokerState

__all__ = ["HttpApi", "HttpError"]

log = logging.getLogger(__name__)

StartResponse = Callable[..., Any]
_STATUS = {
    200: "200 OK",
    400: "400 Bad Request",
    403: "403 Forbidden",
    404: "404 Not Found",
    405: "405 Method Not Allowed",
    413: "413 Request Entity Too Large",
    500: "500 Internal Server Error",
    503: "503 Service Unavailable",
}


class HttpError(Exception):
    """An error answer: ``status`` and nsqd's message text."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Request:
    def __init__(self, environ: dict[str, Any]) -> None:
        self.environ = environ
        self.method = environ.get("REQUEST_METHOD", "GET")
        self.path = environ.get("PATH_INFO", "/")
        try:
            self.params = parse_qs(
                environ.get("QUERY_STRING", ""), keep_blank_values=True, strict_parsing=False
            )
        except ValueError:
            raise HttpError(400, "INVALID_REQUEST") from None
        try:
            self.content_length = int(environ.get("CONTENT_LENGTH") or -1)
        except ValueError:
            self.content_length = -1

    def get(self, name: str) -> str | None:
        values = self.params.get(name)
        return values[0] if values else None

    def read(self, limit: int) -> bytes:
        """Read at most ``limit`` bytes of the body."""
        stream = self.environ["wsgi.input"]
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = stream.read(min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)


class HttpApi:
    """The WSGI application; one per broker."""

    def __init__(self, broker: BrokerState, https_port: Callable[[], int] | None = None) -> None:
        self.broker = broker
        #: ``None`` on the HTTPS listener; on the plain one, the HTTPS port a 403
        #: ``TLS_REQUIRED`` names when ``tls_required`` is ``True`` (as nsqd).
        self.https_port = https_port
        self.routes: dict[str, tuple[str, Callable[[_Request], Any]]] = {
            "/ping": ("GET", self._ping),
            "/info": ("GET", self._info),
            "/stats": ("GET", self._stats),
            "/pub": ("POST", self._pub),
            "/mpub": ("POST", self._mpub),
            "/topic/create": ("POST", self._topic_create),
            "/topic/delete": ("POST", self._topic_delete),
            "/topic/empty": ("POST", self._topic_empty),
            "/topic/pause": ("POST", self._topic_pause),
            "/topic/unpause": ("POST", self._topic_pause),
            "/channel/create": ("POST", self._channel_create),
            "/channel/delete": ("POST", self._channel_delete),
            "/channel/empty": ("POST", self._channel_empty),
            "/channel/pause": ("POST", self._channel_pause),
            "/channel/unpause": ("POST", self._channel_pause),
        }

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if self.https_port is not None and self.broker.options.tls_required is True:
            # nsqd answers every plain HTTP request so, before routing, in these bytes
            refusal = f'{{"message": "TLS_REQUIRED", "https_port": {self.https_port()}}}'
            return self._respond(start_response, 403, refusal, json_text=True)
        try:
            request = _Request(environ)
            route = self.routes.get(request.path)
            if route is None:
                raise HttpError(404, "NOT_FOUND")
            method, handler = route
            if request.method != method:  # httprouter maps no HEAD to GET: 405 like nsqd
                raise HttpError(405, "METHOD_NOT_ALLOWED")
            result = handler(request)
        except HttpError as err:
            return self._respond(start_response, err.status, {"message": err.message})
        except Exception:
            log.exception("HTTP %s failed", environ.get("PATH_INFO"))
            return self._respond(start_response, 500, {"message": "INTERNAL_ERROR"})
        return self._respond(start_response, 200, result, plain=request.path == "/ping")

    def _respond(
        self,
        start_response: StartResponse,
        status: int,
        data: Any,
        plain: bool = False,
        json_text: bool = False,
    ) -> list[bytes]:
        """Send ``data``: JSON-encoded, or as given when bytes or str (``json_text``:
        a str that already is JSON, labelled so); ``plain`` leaves out nsqd's
        ``X-NSQ-Content-Type``."""
        headers = [] if plain else [("X-NSQ-Content-Type", "nsq; version=1.0")]
        if data is None:
            body = b""
        elif isinstance(data, bytes):
            body = data
            headers.append(("Content-Type", "text/plain; charset=utf-8"))
        elif isinstance(data, str):
            body = data.encode("utf-8")
            kind = "application/json" if json_text else "text/plain"
            headers.append(("Content-Type", f"{kind}; charset=utf-8"))
        else:
            body = json.dumps(data, separators=(",", ":")).encode("utf-8")
            headers.append(("Content-Type", "application/json; charset=utf-8"))
        headers.append(("Content-Length", str(len(body))))
        start_response(_STATUS.get(status, f"{status} Error"), headers)
        return [body]

    # -- argument helpers ----------------------------------------------------

    def _topic_name(self, request: _Request) -> str:
        name = request.get("topic")
        if name is None:
            raise HttpError(400, "MISSING_ARG_TOPIC")
        if not valid_topic_name(name):
            raise HttpError(400, "INVALID_TOPIC")
        return name

    def _existing_topic(self, request: _Request, invalid: str = "INVALID_TOPIC") -> Topic:
        name = request.get("topic")
        if name is None:
            raise HttpError(400, "MISSING_ARG_TOPIC")
        if not valid_topic_name(name):
            raise HttpError(400, invalid)
        topic = self.broker.topics.get(name)
        if topic is None:
            raise HttpError(404, "TOPIC_NOT_FOUND")
        return topic

    def _topic_and_channel(self, request: _Request) -> tuple[Topic, str]:
        name = request.get("topic")
        if name is None:
            raise HttpError(400, "MISSING_ARG_TOPIC")
        if not valid_topic_name(name):
            raise HttpError(400, "INVALID_ARG_TOPIC")
        channel = request.get("channel")
        if channel is None:
            raise HttpError(400, "MISSING_ARG_CHANNEL")
        if not valid_channel_name(channel):
            raise HttpError(400, "INVALID_ARG_CHANNEL")
        topic = self.broker.topics.get(name)
        if topic is None:
            raise HttpError(404, "TOPIC_NOT_FOUND")
        return topic, channel

    def _existing_channel(self, request: _Request) -> tuple[Topic, Channel]:
        topic, name = self._topic_and_channel(request)
        channel = topic.channels.get(name)
        if channel is None:
            raise HttpError(404, "CHANNEL_NOT_FOUND")
        return topic, channel

    # -- handlers ------------------------------------------------------------

    def _ping(self, request: _Request) -> bytes:
        return b"OK"

    def _info(self, request: _Request) -> Any:
        return stats_module.info(self.broker)

    def _stats(self, request: _Request) -> Any:
        topic = request.get("topic") or None
        channel = request.get("channel") or None
        include_clients = request.get("include_clients") not in ("false", "0")
        include_mem = request.get("include_mem") not in ("false", "0")
        document = stats_module.stats(self.broker, topic, channel, include_clients, include_mem)
        if request.get("format") == "json":
            return document
        return stats_module.stats_text(document)

    def _pub(self, request: _Request) -> bytes:
        opts = self.broker.options
        if request.content_length > opts.max_msg_size:
            raise HttpError(413, "MSG_TOO_BIG")
        body = request.read(opts.max_msg_size + 1)
        if len(body) > opts.max_msg_size:
            raise HttpError(413, "MSG_TOO_BIG")
        if not body:
            raise HttpError(400, "MSG_EMPTY")
        name = self._topic_name(request)
        self.broker.get_topic(name)  # nsqd's getTopicFromQuery creates it before checking defer
        delay = 0.0
        deferred = request.get("defer")
        if deferred is not None:
            try:
                ms = int(deferred)
            except ValueError:
                raise HttpError(400, "INVALID_DEFER") from None
            if ms < 0 or ms > opts.max_req_timeout * 1000:
                raise HttpError(400, "INVALID_DEFER")
            delay = ms / 1000
        self.broker.publish(name, [body], delay)
        return b"OK"

    def _mpub(self, request: _Request) -> bytes:
        opts = self.broker.options
        if request.content_length > opts.max_body_size:
            raise HttpError(413, "BODY_TOO_BIG")
        name = self._topic_name(request)
        self.broker.get_topic(name)  # nsqd creates it before reading the body
        # nsqd's boolParams: "true"/"1" and "false"/"0"; any other value means binary
        binary_arg = request.get("binary")
        binary = binary_arg is not None and binary_arg not in ("false", "0")
        body = request.read(opts.max_body_size + 1)
        if len(body) > opts.max_body_size:
            raise HttpError(413, "BODY_TOO_BIG")
        if binary:
            try:
                # nsqd reads the messages off the request body and ignores what follows
                bodies = split_mpub(body, opts.max_msg_size, opts.max_body_size)
            except ServerError as err:
                raise HttpError(413, err.code[2:]) from None
        else:
            bodies = []
            for line in body.split(b"\n"):
                if not line:
                    continue  # nsqd silently skips empty lines
                if len(line) > opts.max_msg_size:
                    raise HttpError(413, "MSG_TOO_BIG")
                bodies.append(line)
        self.broker.publish(name, bodies)
        return b"OK"

    def _topic_create(self, request: _Request) -> None:
        self.broker.get_topic(self._topic_name(request))

    def _topic_delete(self, request: _Request) -> None:
        name = request.get("topic")
        if name is None:
            raise HttpError(400, "MISSING_ARG_TOPIC")
        if not self.broker.delete_topic(name):
            raise HttpError(404, "TOPIC_NOT_FOUND")

    def _topic_empty(self, request: _Request) -> None:
        self._existing_topic(request).empty()

    def _topic_pause(self, request: _Request) -> None:
        # nsqd's doPauseTopic does not validate the name: an invalid one is just not found
        name = request.get("topic")
        if name is None:
            raise HttpError(400, "MISSING_ARG_TOPIC")
        topic = self.broker.topics.get(name)
        if topic is None:
            raise HttpError(404, "TOPIC_NOT_FOUND")
        self.broker.pause_topic(topic, not request.path.endswith("unpause"))

    def _channel_create(self, request: _Request) -> None:
        topic, name = self._topic_and_channel(request)
        self.broker.create_channel(topic, name)

    def _channel_delete(self, request: _Request) -> None:
        topic, channel = self._existing_channel(request)
        self.broker.delete_channel(topic.name, channel.name)

    def _channel_empty(self, request: _Request) -> None:
        _, channel = self._existing_channel(request)
        channel.empty()

    def _channel_pause(self, request: _Request) -> None:
        _, channel = self._existing_channel(request)
        self.broker.pause_channel(channel, not request.path.endswith("unpause"))
