"""pynsq's named events: the ``on``/``off``/``trigger`` mixin and the event names.

pynsq's :class:`~gnsqlite.nsq.Message` and :class:`~gnsqlite.nsq.conn.AsyncConn`
report what happens to them as events; code written against pynsq listens
with ``message.on(nsq.event.FINISH, callback)``. Listeners run in the
greenlet that triggers the event, in the order they were added, and must
not block for long.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "AUTH",
    "AUTH_RESPONSE",
    "BACKOFF",
    "CLOSE",
    "CONNECT",
    "CONTINUE",
    "DATA",
    "ERROR",
    "FINISH",
    "HEARTBEAT",
    "IDENTIFY",
    "IDENTIFY_RESPONSE",
    "MESSAGE",
    "READY",
    "REQUEUE",
    "RESPONSE",
    "RESUME",
    "TOUCH",
    "DuplicateListenerError",
    "EventedMixin",
    "InvalidListenerError",
]

CONNECT = "connect"
CLOSE = "close"
DATA = "data"
ERROR = "error"
IDENTIFY = "identify"
READY = "ready"
RESPONSE = "response"
MESSAGE = "message"
HEARTBEAT = "heartbeat"
BACKOFF = "backoff"
CONTINUE = "continue"
RESUME = "resume"
REQUEUE = "requeue"
TOUCH = "touch"
FINISH = "finish"
AUTH = "auth"
AUTH_RESPONSE = "auth_response"
IDENTIFY_RESPONSE = "identify_response"


class DuplicateListenerError(Exception):
    """:meth:`EventedMixin.on` was given a callback already listening to that event."""


class InvalidListenerError(Exception):
    """:meth:`EventedMixin.off` was given a callback that is not listening to that event."""


class EventedMixin:
    """Named events with listeners, as pynsq's ``nsq.event.EventedMixin``."""

    def __init__(self) -> None:
        self._listeners: dict[str, list[Callable[..., Any]]] = {}

    def on(self, name: str, callback: Callable[..., Any]) -> None:
        """Call ``callback(**kwargs)`` each time the event ``name`` is triggered.

        Raises ``AssertionError`` if ``callback`` is not callable (as pynsq)
        and :class:`DuplicateListenerError` if it already listens to ``name``.
        """
        if not callable(callback):
            raise AssertionError(f"callback is not callable: {callback!r}")
        listeners = self._listeners.setdefault(name, [])
        if callback in listeners:
            raise DuplicateListenerError(f"{callback!r} already listens to {name!r}")
        listeners.append(callback)

    def off(self, name: str, callback: Callable[..., Any]) -> None:
        """Stop calling ``callback`` for ``name``; :class:`InvalidListenerError` if it was not."""
        listeners = self._listeners.get(name, [])
        if callback not in listeners:
            raise InvalidListenerError(f"{callback!r} does not listen to {name!r}")
        listeners.remove(callback)

    def trigger(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Call every listener of ``name`` with these arguments, in the order they were added.

        A listener's exception propagates to the caller (as in pynsq).
        """
        for listener in list(self._listeners.get(name, ())):
            listener(*args, **kwargs)
