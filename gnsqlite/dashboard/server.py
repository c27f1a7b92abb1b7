"""The :class:`Dashboard`: a read-only live page over gevent's WSGI server and a websocket.

::

    dashboard = Dashboard(consumer, producer)
    dashboard.start(("127.0.0.1", 8080))     # returns at once
    print(dashboard.url)
    ...
    dashboard.stop()

A sampler greenlet looks at every source once per ``interval`` seconds,
keeps ``history`` seconds of rates (received, finished, requeued per
second), the recent events and the tail of observed message bodies, and
pushes each new sample to every open page over a websocket (``/ws``).
``/api/snapshot`` answers the same data as JSON. The page's files are
shipped in the package (``static/``): no CDN, no network access.

Nothing on the page can change a consumer: the server only serves files
and sends data; what a page sends on the websocket is read and dropped.
Requests whose ``Host`` (and, for the websocket, ``Origin``) is not this
server are refused, so another site open in the same browser cannot read
the message bodies. It binds 127.0.0.1 unless told otherwise.

Needs the ``dashboard`` extra (``pip install gnsqlite[dashboard]``:
gevent-websocket), imported when :meth:`Dashboard.start` runs.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import importlib
import importlib.resources
import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import gevent
import gevent.event
import gevent.pool
import gevent.pywsgi

from ..errors import ConfigError
from .sources import HTTPSource, Source, make_source

__all__ = ["Dashboard"]

log = logging.getLogger(__name__)

StartResponse = Callable[..., Any]

_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")


class Dashboard:
    """A live view of ``sources`` (Consumers and Producers of this process).

    ``nsqd_http_addresses`` and ``lookupd_http_addresses`` add a cluster
    watched over HTTP (``/stats`` of each nsqd, found through lookupd).
    ``interval`` is the sampling period and ``history`` how much of it the
    charts keep, both in seconds; ``tail_size`` how many recent message
    bodies are kept, each cut to ``body_limit`` characters.

    The constructor opens no socket and starts no greenlet.
    """

    def __init__(
        self,
        *sources: Any,
        nsqd_http_addresses: Iterable[str] = (),
        lookupd_http_addresses: Iterable[str] = (),
        interval: float = 1.0,
        history: float = 600.0,
        tail_size: int = 50,
        body_limit: int = 200,
    ) -> None:
        if not interval > 0:
            raise ConfigError(f"interval={interval!r} is out of range: use more than 0 seconds")
        if not history >= interval:
            raise ConfigError(f"history={history!r} is out of range: use at least the interval")
        if tail_size < 0 or body_limit < 1:
            raise ConfigError("tail_size must be 0 or more and body_limit 1 or more")
        self.sources: list[Source] = [make_source(s, i) for i, s in enumerate(sources)]
        nsqds, lookupds = list(nsqd_http_addresses), list(lookupd_http_addresses)
        if nsqds or lookupds:
            self.sources.append(HTTPSource(nsqds, lookupds, index=len(self.sources)))
        if not self.sources:
            raise ConfigError(
                "nothing to watch: pass Consumers/Producers, nsqd_http_addresses="
                " or lookupd_http_addresses="
            )
        self.interval = interval
        self.history = history
        self.body_limit = body_limit
        points = max(2, int(history / interval) + 1)
        self._history: dict[str, collections.deque[list[float]]] = {
            s.id: collections.deque(maxlen=points) for s in self.sources
        }
        self._totals: dict[str, dict[str, float]] = {}
        self._events: collections.deque[dict[str, Any]] = collections.deque(maxlen=200)
        self._tail: collections.deque[dict[str, Any]] = collections.deque(maxlen=tail_size)
        self._new_events: list[dict[str, Any]] = []
        self._new_tail: list[dict[str, Any]] = []
        self._snapshot: dict[str, Any] = {"t": time.time(), "sources": []}
        self._observing: list[tuple[Any, Callable[[Any], None]]] = []
        self._frame: bytes = b""
        self._tick = gevent.event.Event()
        self._server: gevent.pywsgi.WSGIServer | None = None
        self._pool = gevent.pool.Pool()
        self._sampler: gevent.Greenlet[Any, Any] | None = None
        self._host = ""
        self._port = 0
        self._sequence = 0

    def __repr__(self) -> str:
        return f"<Dashboard {self.url or 'stopped'} sources={len(self.sources)}>"

    # -- lifecycle ---------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://host:port/`` once started, else ``""``."""
        if self._server is None:
            return ""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self._port}/"

    @property
    def address(self) -> tuple[str, int] | None:
        """The bound ``(host, port)`` once started."""
        return (self._host, self._port) if self._server is not None else None

    def start(self, address: tuple[str, int] = ("127.0.0.1", 8080)) -> None:
        """Bind ``address`` (port 0: a free port) and serve; returns at once.

        Raises ``OSError`` when the address cannot be bound, and
        ``ImportError`` naming the extra when gevent-websocket is missing.
        """
        if self._server is not None:
            return
        try:
            handler = importlib.import_module("geventwebsocket.handler").WebSocketHandler
        except ImportError:
            raise ImportError(
                "the dashboard needs gevent-websocket: pip install 'gnsqlite[dashboard]'"
            ) from None
        server = gevent.pywsgi.WSGIServer(
            address,
            self._app,
            handler_class=handler,
            spawn=self._pool,
            log=None,
            error_log=logging.getLogger(__name__ + ".http"),
        )
        server.start()
        self._server = server
        bound: Any = server.address
        self._host, self._port = str(bound[0]), int(bound[1])
        for source in self.sources:
            consumer = getattr(source, "consumer", None)
            if consumer is not None and hasattr(consumer, "add_message_observer"):
                observer = functools.partial(self.observe, source=consumer)
                consumer.add_message_observer(observer)
                self._observing.append((consumer, observer))
        self._sample_once()
        self._sampler = gevent.spawn(self._sample_loop)
        log.info("dashboard at %s", self.url)

    def stop(self) -> None:
        """Close every page's connection, stop serving and sampling; blocks up to ~1 s."""
        server, self._server = self._server, None
        if server is None:
            return
        for consumer, observer in self._observing:
            consumer.remove_message_observer(observer)
        self._observing.clear()
        if self._sampler is not None:
            self._sampler.kill()
            self._sampler = None
        self._tick.set()  # wakes the page greenlets, which see the server gone
        server.stop(timeout=1)
        self._pool.kill(timeout=1)

    def __enter__(self) -> Dashboard:
        self.start(("127.0.0.1", 0))
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- the message tail ----------------------------------------------------

    def observe(self, message: Any, source: Any = None) -> None:
        """Add a message (anything with ``body``, ``id``, ``attempts``, ``nsqd``) to the tail.

        Keeps only the first ``body_limit`` characters of its body, decoded
        as UTF-8 (bad bytes replaced). Does not block.
        """
        if self._tail.maxlen == 0:
            return
        body = bytes(getattr(message, "body", b""))
        text = body[: self.body_limit * 4].decode("utf-8", "replace")[: self.body_limit]
        entry = {
            "t": time.time(),
            "source": self._source_id(source),
            "id": str(getattr(message, "id", "")),
            "attempts": int(getattr(message, "attempts", 0)),
            "nsqd": str(getattr(message, "nsqd", "")),
            "size": len(body),
            "body": text,
            "truncated": len(text) < len(body.decode("utf-8", "replace")),
        }
        self._tail.append(entry)
        self._new_tail.append(entry)
        del self._new_tail[: -max(1, self._tail.maxlen or 1)]

    def tap(self, handler: Callable[[Any], Any], source: Any = None) -> Callable[[Any], Any]:
        """Wrap a handler so each message it gets is shown in the tail.

        Consumers given to the dashboard are observed by themselves (through
        ``Consumer.add_message_observer``); this is for anything else that
        hands messages to a handler. The wrapper calls :meth:`observe` then
        ``handler(message)`` and returns its result.
        """

        def tapped(message: Any) -> Any:
            self.observe(message, source)
            return handler(message)

        return tapped

    def _source_id(self, source: Any) -> str:
        for s in self.sources:
            if source is not None and getattr(s, "consumer", None) is source:
                return s.id
        return ""

    # -- sampling --------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The latest sample, history, events and tail as one JSON-ready dict."""
        return {
            "type": "hello",
            "interval": self.interval,
            "history_seconds": self.history,
            "snapshot": self._snapshot,
            "history": {k: list(v) for k, v in self._history.items()},
            "events": list(self._events),
            "tail": list(self._tail),
        }

    def _sample_loop(self) -> None:
        next_at = time.monotonic()
        while True:
            next_at += self.interval
            gevent.sleep(max(0.0, next_at - time.monotonic()))
            try:
                self._sample_once()
            except Exception:
                log.exception("dashboard: sampling failed")
            if next_at < time.monotonic() - self.interval:  # fell behind: do not catch up
                next_at = time.monotonic()

    def _sample_once(self) -> None:
        now = time.time()
        jobs = [gevent.spawn(_sample, source) for source in self.sources]
        gevent.joinall(jobs)
        states = []
        points: dict[str, list[float]] = {}
        for source, job in zip(self.sources, jobs, strict=True):
            state: dict[str, Any]
            events: list[str]
            state, events = job.value if job.value is not None else ({"error": "no sample"}, [])
            for text in events:
                event = {"t": now, "source": source.id, "text": text}
                self._events.append(event)
                self._new_events.append(event)
            point = self._rates(source.id, now, state.get("totals"))
            if point is not None:
                self._history[source.id].append(point)
                points[source.id] = point
                names = ("received", "finished", "requeued")
                state["rates"] = dict(zip(names, point[1:], strict=True))
            states.append({"id": source.id, "kind": source.kind, "title": source.title, **state})
        self._snapshot = {"t": now, "sources": states}
        self._sequence += 1
        frame = {
            "type": "tick",
            "sequence": self._sequence,
            "snapshot": self._snapshot,
            "points": points,
            "events": self._new_events,
            "tail": self._new_tail,
        }
        self._new_events, self._new_tail = [], []
        self._frame = json.dumps(frame).encode("utf-8")
        tick, self._tick = self._tick, gevent.event.Event()
        tick.set()

    def _rates(self, source_id: str, now: float, totals: Any) -> list[float] | None:
        if not isinstance(totals, dict):
            return None
        current = {k: float(totals.get(k, 0)) for k in ("received", "finished", "requeued")}
        before = self._totals.get(source_id)
        self._totals[source_id] = {"t": now, **current}
        if before is None:
            return None  # a rate needs two samples
        elapsed = max(now - before["t"], 1e-6)
        return [now] + [
            round(max(0.0, current[k] - before[k]) / elapsed, 3)
            for k in ("received", "finished", "requeued")
        ]

    # -- HTTP --------------------------------------------------------------------

    def _allowed(self, environ: dict[str, Any]) -> bool:
        """Refuse a foreign ``Host`` (DNS rebinding) and ``Origin`` (cross-site websocket)."""
        host = environ.get("HTTP_HOST", "")
        if not _same_server(host, self._host, self._port):
            return False
        origin = environ.get("HTTP_ORIGIN")
        if origin is None:
            return True
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and parts.netloc == host

    def _app(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        path = environ.get("PATH_INFO", "/")
        method = environ.get("REQUEST_METHOD", "GET")
        if not self._allowed(environ):
            return _respond(start_response, "403 Forbidden", b"forbidden host or origin\n")
        if method not in ("GET", "HEAD"):
            return _respond(start_response, "405 Method Not Allowed", b"read-only\n")
        if path == "/ws":
            ws = environ.get("wsgi.websocket")
            if ws is None:
                return _respond(start_response, "400 Bad Request", b"websocket only\n")
            self._serve_websocket(ws)
            return []
        if path == "/api/snapshot":
            body = json.dumps(self.snapshot()).encode("utf-8")
            return _respond(start_response, "200 OK", body, "application/json")
        if path in _STATIC:
            name, content_type = _STATIC[path]
            data = importlib.resources.files(__package__).joinpath(f"static/{name}").read_bytes()
            return _respond(start_response, "200 OK", data, content_type)
        return _respond(start_response, "404 Not Found", b"not found\n")

    def _serve_websocket(self, ws: Any) -> None:
        """Send the whole state, then every tick, until the page or the server goes."""
        closed = gevent.event.Event()

        def drain() -> None:  # the page's messages are read and dropped: read-only
            try:
                while ws.receive() is not None:
                    pass
            except Exception:
                pass
            closed.set()

        reader = self._pool.spawn(drain)
        try:
            ws.send(json.dumps(self.snapshot()))
            sent = self._sequence
            while self._server is not None and not closed.is_set():
                tick = self._tick
                tick.wait(timeout=max(5.0, self.interval * 2))
                if self._sequence != sent and self._frame:
                    sent = self._sequence
                    ws.send(self._frame.decode("utf-8"))
        except Exception as exc:  # the page went away mid-send
            log.debug("dashboard: websocket closed: %s", exc)
        finally:
            reader.kill(block=False)
            with contextlib.suppress(Exception):
                ws.close()


def _sample(source: Source) -> tuple[dict[str, Any], list[str]]:
    """``source.sample()``, an error becoming ``{"error": ...}`` (not a printed traceback)."""
    try:
        return source.sample()
    except Exception as exc:
        log.warning("dashboard: sampling %s failed: %s", source.title, exc)
        return {"error": str(exc)}, []


def _same_server(host_header: str, host: str, port: int) -> bool:
    """Whether a ``Host`` header names this server (any name, when bound to all interfaces)."""
    if not host_header:
        return False
    name, _, port_text = host_header.rpartition(":")
    if not name or port_text != str(port):
        return False
    if host in ("0.0.0.0", "::", ""):
        return True
    if host in ("127.0.0.1", "::1"):
        return name in _LOOPBACK_NAMES
    return name in (host, f"[{host}]")


def _respond(
    start_response: StartResponse,
    status: str,
    body: bytes,
    content_type: str = "text/plain; charset=utf-8",
) -> list[bytes]:
    start_response(
        status,
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            ("X-Content-Type-Options", "nosniff"),
            ("Referrer-Policy", "no-referrer"),
            (
                "Content-Security-Policy",
                "default-src 'self'; connect-src 'self'; img-src 'self' data:;"
                " frame-ancestors 'none'",
            ),
        ],
    )
    return [body]
