"""A small nsqd auth server for tests (the ``--auth-http-address`` protocol).

nsqd asks ``GET /auth?remote_ip=...&tls=true|false&secret=...&common_name=...``
and expects ``{"ttl": seconds, "identity": ..., "identity_url": ...,
"authorizations": [{"topic": regex, "channels": [regex, ...],
"permissions": ["subscribe", "publish"]}]}``, or a non-200 status to refuse.
:class:`AuthServer` answers with what ``policy(remote_ip, tls, secret)``
returns (``None`` means 403), the same signature as the embedded broker's
``auth_policy``. :func:`grant` builds such an answer.

The server runs in its own OS thread with its own gevent hub, so it answers
while the test thread blocks (in tornado's IOLoop, say), patched or not.
``policy`` runs in that thread.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs

import gevent
import gevent.event
import gevent.monkey
import gevent.pywsgi

from ..errors import NSQTimeoutError

__all__ = ["AuthPolicy", "AuthServer", "grant"]

log = logging.getLogger(__name__)

#: ``policy(remote_ip, tls, secret)`` -> the JSON answer, or ``None`` for 403.
AuthPolicy = Callable[[str, bool, str], "Mapping[str, Any] | None"]

# Real threads and locks even in a monkey-patched process.
_start_new_thread = gevent.monkey.get_original("_thread", "start_new_thread")
_allocate_lock = gevent.monkey.get_original("_thread", "allocate_lock")


def grant(
    identity: str = "test-user",
    topic: str = ".*",
    channels: Sequence[str] = (".*",),
    permissions: Sequence[str] = ("subscribe", "publish"),
    ttl: int = 3600,
) -> dict[str, Any]:
    """An auth answer allowing ``permissions`` on topics and channels matching the regexes."""
    return {
        "ttl": ttl,
        "identity": identity,
        "identity_url": "",
        "authorizations": [
            {"topic": topic, "channels": list(channels), "permissions": list(permissions)}
        ],
    }


class AuthServer:
    """An auth HTTP server on ``127.0.0.1:port`` (``address`` once started).

    ``requests`` lists every query received, as dicts of the query
    parameters (``remote_ip``, ``tls``, ``secret``, ``common_name``).
    """

    def __init__(self, policy: AuthPolicy, port: int = 0) -> None:
        self.policy = policy
        self.port = port
        self.requests: list[dict[str, str]] = []
        self._stop: Any = None  # the async watcher that wakes the server thread
        self._done: Any = None
        self._error: BaseException | None = None

    @property
    def address(self) -> str:
        """``"127.0.0.1:port"``, for nsqd's ``--auth-http-address``."""
        return f"127.0.0.1:{self.port}"

    def __repr__(self) -> str:
        return f"<AuthServer {self.address}>"

    def start(self, timeout: float = 10.0) -> None:
        """Start the server thread; blocks until it listens (up to ``timeout`` s)."""
        if self._done is not None:
            return
        ready = _allocate_lock()
        ready.acquire()
        done = _allocate_lock()
        done.acquire()
        self._done = done
        self._error = None
        _start_new_thread(self._thread_main, (ready, done))
        if not ready.acquire(True, timeout):
            raise NSQTimeoutError(f"the auth server did not start within {timeout} s")
        if self._error is not None:
            self._done = None
            raise self._error

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the server and join its thread (up to ``timeout`` s)."""
        done, self._done = self._done, None
        if done is None:
            return
        if self._stop is not None:
            self._stop.send()
        if not done.acquire(True, timeout):
            log.warning("the auth server thread did not stop within %s s", timeout)

    def __enter__(self) -> AuthServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- in the server thread -----------------------------------------------

    def _thread_main(self, ready: Any, done: Any) -> None:
        hub = gevent.get_hub()
        try:
            try:
                server = gevent.pywsgi.WSGIServer(
                    ("127.0.0.1", self.port), self._app, log=None, error_log=log
                )
                server.start()
                self.port = int(server.server_port or 0)
                stopping = gevent.event.Event()
                watcher = hub.loop.async_()
                watcher.start(stopping.set)
                self._stop = watcher
            except BaseException as exc:
                self._error = exc
                return
            finally:
                ready.release()
            try:
                stopping.wait()
            finally:
                server.stop(timeout=1)
                watcher.close()
                self._stop = None
        finally:
            hub.destroy(destroy_loop=True)
            done.release()

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if environ.get("PATH_INFO") != "/auth":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"NOT_FOUND"]
        query = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        self.requests.append(query)
        try:
            answer = self.policy(
                query.get("remote_ip", ""),
                query.get("tls", "").lower() == "true",
                query.get("secret", ""),
            )
        except Exception:
            log.exception("auth policy failed")
            start_response("500 Internal Server Error", [("Content-Type", "text/plain")])
            return [b"policy failed"]
        if answer is None:
            body = json.dumps({"message": "NOT_AUTHORIZED"}).encode()
            start_response("403 Forbidden", [("Content-Type", "application/json")])
            return [body]
        body = json.dumps(dict(answer)).encode()
        start_response(
            "200 OK",
            [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
        )
        return [body]
