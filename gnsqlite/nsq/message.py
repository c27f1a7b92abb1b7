"""The message a :class:`~gnsqlite.nsq.Reader` hands to a pynsq-style handler.

It has pynsq's methods, including the two that are methods rather than
properties there (``is_async()``, ``has_responded()``), and pynsq's
attributes: ``id`` (bytes), ``body`` (bytes), ``timestamp`` (nanoseconds),
``attempts``. Answers go to the gnsqlite :class:`~gnsqlite.message.Message`
it wraps; answering twice does nothing and returns ``False`` (pynsq raises
``AssertionError``).

As in pynsq, a message is an :class:`~gnsqlite.nsq.event.EventedMixin`: each
answer triggers its event (``finish``, ``requeue`` with the requeue's
keywords, ``touch``) with ``message=`` the message, so
``message.on(nsq.event.FINISH, callback)`` works, and a message built with
``Message(id, body, timestamp, attempts)`` (as pynsq code and
:class:`~gnsqlite.nsq.conn.AsyncConn` build them) is answered by whoever
listens.
"""

from __future__ import annotations

from typing import Any

from ..message import Message as _Delivered
from . import event
from .event import EventedMixin

__all__ = ["Message"]


class Message(EventedMixin):
    """A message delivered by nsqd; see the module docstring.

    Built by the Reader; ``Message(id, body, timestamp, attempts)`` (as
    pynsq builds it) makes a detached message whose answers go only to its
    event listeners.
    """

    def __init__(self, id: bytes, body: bytes, timestamp: int, attempts: int) -> None:
        super().__init__()
        self.id = id
        self.body = body
        self.timestamp = timestamp
        self.attempts = attempts
        self._delivered: _Delivered | None = None
        self._async = False
        self._responded = False

    @classmethod
    def _wrap(cls, delivered: _Delivered) -> Message:
        message = cls(
            delivered.id.encode("ascii"), delivered.body, delivered.timestamp, delivered.attempts
        )
        message._delivered = delivered
        return message

    def __repr__(self) -> str:
        return f"<nsq.Message {self.id!r} attempts={self.attempts} body={self.body[:32]!r}>"

    def enable_async(self) -> None:
        """Take over answering: the Reader will not finish or requeue on return."""
        self._async = True
        if self._delivered is not None:
            self._delivered.enable_async()

    def is_async(self) -> bool:
        """Whether :meth:`enable_async` was called."""
        return self._async

    def has_responded(self) -> bool:
        """Whether the message was finished or requeued."""
        if self._delivered is not None:
            return self._delivered.has_responded
        return self._responded

    def finish(self) -> bool:
        """FIN: processed. Does not block; ``False`` if already answered."""
        if self._delivered is not None:
            done = self._delivered.finish()
        else:
            done, self._responded = not self._responded, True
        if done:
            self.trigger(event.FINISH, message=self)
        return done

    def requeue(
        self,
        *,
        backoff: bool = True,
        delay: float | None = None,
        time_ms: int | None = None,
    ) -> bool:
        """REQ: deliver again later. Does not block; ``False`` if already answered.

        ``delay`` is seconds (int or float), ``time_ms`` milliseconds; with
        neither (or ``-1``) the Reader's policy applies: ``requeue_delay``
        times the attempts. ``backoff`` says whether the failure slows the
        Reader down.
        """
        seconds: float | None = None
        if delay is not None and delay >= 0:
            seconds = float(delay)
        elif time_ms is not None and time_ms >= 0:
            seconds = time_ms / 1000.0
        if self._delivered is not None:
            done = self._delivered.requeue(seconds, backoff=backoff)
        else:
            done, self._responded = not self._responded, True
        if done:
            keywords: dict[str, Any] = {"backoff": backoff}
            keywords["time_ms"] = -1 if seconds is None else round(seconds * 1000)
            self.trigger(event.REQUEUE, message=self, **keywords)
        return done

    def touch(self) -> bool:
        """TOUCH: reset nsqd's timeout for the message. ``False`` if already answered."""
        done = self._delivered.touch() if self._delivered is not None else not self._responded
        if done:
            self.trigger(event.TOUCH, message=self)
        return done
