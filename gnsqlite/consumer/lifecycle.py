"""The consumer's lifecycle: started, closing, drained, closed.

One :class:`Lifecycle` per consumer, shared by its collaborators: the links
and the dispatcher read :attr:`Lifecycle.closing` (a plain attribute: read
once per message), flow control sets :attr:`Lifecycle.drained` when nothing
is left in flight while closing, and :meth:`Consumer.close
<gnsqlite.consumer.Consumer.close>` moves it from one state to the next.
It starts no greenlet and owns no timer; its ``owner`` (the consumer) owns
the timers the collaborators schedule, and names them in log lines.
"""

from __future__ import annotations

import gevent.event

__all__ = ["Lifecycle"]


class Lifecycle:
    """Where a consumer is in its life; see the module docstring."""

    __slots__ = ("closing", "drained", "owner", "started", "stopped")

    def __init__(self, owner: object) -> None:
        #: The consumer: owner of the collaborators' timers, and their name in logs.
        self.owner = owner
        #: True once :meth:`start` ran.
        self.started = False
        #: True once :meth:`begin_close` ran: no more backoff, RDY stays 0,
        #: messages that arrive are requeued.
        self.closing = False
        #: Set when no message is left in flight (flow control sets it, and
        #: waits on it while closing: :meth:`FlowControl.wait_drained
        #: <gnsqlite.consumer.flow_control.FlowControl.wait_drained>`).
        self.drained = gevent.event.Event()
        #: Set when the close finished.
        self.stopped = gevent.event.Event()

    def __repr__(self) -> str:
        return repr(self.owner)

    def start(self) -> bool:
        """Mark it started; ``False`` if it already was. Call only before closing."""
        if self.started:
            return False
        self.started = True
        return True

    def begin_close(self) -> bool:
        """Mark it closing; ``False`` if a close already began (nothing to do but wait)."""
        if self.closing:
            return False
        self.closing = True
        return True

    def finish_close(self) -> None:
        """The close finished: :meth:`wait_closed` returns."""
        self.stopped.set()

    def wait_closed(self, timeout: float | None = None) -> bool:
        """Block until the close finished; ``True`` if it did within ``timeout`` seconds."""
        return bool(self.stopped.wait(timeout))

    @property
    def closed(self) -> bool:
        """True once the close finished."""
        return self.stopped.is_set()
