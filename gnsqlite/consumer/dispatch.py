"""The dispatcher: the queue of work, the handler greenlets, and their drain.

A reader greenlet (through its link) or the batcher hands a message or a
batch to :meth:`Dispatcher.enqueue`, which never blocks: the item is queued
and a worker greenlet is spawned when none is idle and fewer than
``concurrency`` run (workers are reused, not spawned per message). A worker
takes items until told to stop and hands each to the settler, which runs
the handler and answers. The dispatcher owns the worker greenlets:
:meth:`drain` ends them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import gevent
import gevent.pool
import gevent.queue

from ..batch import Batch, Batcher, messages_of
from ..message import Message
from .flow_control import FlowControl
from .settle import Settler

__all__ = ["Dispatcher", "requeue_now"]

log = logging.getLogger(__name__)

Item = Message | Batch


def requeue_now(item: Item | None) -> None:
    """Requeue a message, or every message of a batch, at once and without backoff.

    Those already answered are left alone (``requeue`` returns ``False``).
    """
    for message in messages_of(item) if item is not None else ():
        message.requeue(0.0, backoff=False)


class Dispatcher:
    """Queues work and runs it in a pool of handler greenlets; see the module docstring.

    ``handler(message)`` is what a worker calls for a single message (the
    consumer sets it; it may change at any time); ``batcher`` runs batches.
    """

    def __init__(
        self,
        settler: Settler,
        flow: FlowControl,
        concurrency: int | None,
        batcher: Batcher | None = None,
    ) -> None:
        self._settler = settler
        self._flow = flow
        self._concurrency = concurrency
        self.batcher = batcher
        self.handler: Callable[[Message], Any] | None = None
        self._queue: gevent.queue.Queue[Item | None] = gevent.queue.Queue()
        self._workers = gevent.pool.Pool()
        self._idle = 0
        #: worker greenlet -> what it handles now
        self.running: dict[Any, Item] = {}

    @property
    def concurrency(self) -> int:
        """How many handler greenlets may run at once (default: ``max_in_flight``, at least 1)."""
        return self._concurrency or max(1, self._flow.planner.max_in_flight)

    @property
    def queued(self) -> int:
        """Items waiting for a worker."""
        return self._queue.qsize()

    def enqueue(self, item: Item) -> None:
        """Queue a message or a batch for a worker, spawning one if needed. Never blocks."""
        queue = self._queue
        queue.put(item)
        if self._idle < queue.qsize() and len(self._workers.greenlets) < (
            self._concurrency or max(1, self._flow.planner.max_in_flight)  # concurrency, inlined
        ):
            self._workers.spawn(self._work)

    def drop(self, connection: object) -> None:
        """Remove ``connection``'s single messages from the queue (it died: nsqd redelivers)."""
        waiting = self._queue.queue  # the Queue's deque; removing items wakes nobody
        # A batch keeps its messages of ``connection``: settle_batch skips them.
        if any(isinstance(m, Message) and m.connection is connection for m in waiting):
            kept = [
                m for m in waiting if not isinstance(m, Message) or m.connection is not connection
            ]
            waiting.clear()
            waiting.extend(kept)

    def requeue_queued(self) -> None:
        """Requeue everything still queued (closing). Never blocks."""
        while True:
            try:
                item = self._queue.get_nowait()
            except gevent.queue.Empty:
                return
            requeue_now(item)

    def drain(self, timeout: float) -> None:
        """Let the workers finish what they run, then end them; blocks up to ``timeout`` s.

        Called from a worker (close() inside a handler), that worker is not
        waited for: it ends when its handler returns.
        """
        current = gevent.getcurrent()
        workers = [g for g in self._workers if g is not current]
        for _ in workers:
            self._queue.put(None)
        gevent.joinall(workers, timeout=max(0.0, timeout))

    def kill(self) -> None:
        """End every worker but the calling one; blocks until they ended."""
        current = gevent.getcurrent()
        gevent.killall([g for g in self._workers if g is not current], block=True)

    def _work(self) -> None:
        queue = self._queue
        flow = self._flow
        settler = self._settler
        me = gevent.getcurrent()
        while True:
            self._idle += 1
            try:
                item = queue.get()
            finally:
                self._idle -= 1
            if item is None:
                return
            if flow.closing:
                requeue_now(item)
                continue
            self.running[me] = item
            try:
                if type(item) is Batch:
                    if self.batcher is not None:
                        self.batcher.run(item)
                else:
                    handler = self.handler
                    if handler is None:
                        raise RuntimeError("the consumer set no handler")
                    settler.settle(item, handler)  # type: ignore[arg-type]
            finally:
                self.running.pop(me, None)
            if flow.closing:
                return  # close() requeues what is still queued
