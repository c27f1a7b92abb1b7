"""The dispatcher: the queue of work, the handler greenlets, and their drain.

A reader greenlet (through its link) or the batcher hands a message or a
batch to :meth:`Dispatcher.enqueue`, which never blocks: the item is queued
and an idle worker is woken, or, when none is idle and fewer than
``concurrency`` run, a worker greenlet is spawned (workers are reused, not
spawned per message). A worker takes items until told to stop and hands
each to the settler, which runs the handler and answers. The dispatcher
owns the worker greenlets: :meth:`drain` ends them.

The queue is a plain deque and an idle worker waits on a
:class:`gevent.hub.Waiter` of its own. One hub callback (:meth:`_wake`,
scheduled by the first item while workers are idle) switches to idle
workers in turn while items are left: a worker takes items until the queue
is empty, so a read's worth of messages wakes one worker, not one each, and
the next wakes only if the first blocks with items left (why not a
``gevent.queue.Queue``: docs/benchmarks.md, "The dispatcher's queue").
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Final, Protocol

import gevent
import gevent.pool
from gevent.hub import Waiter, get_hub

from ..message import Message
from .batch import Batch, Batcher, messages_of
from .lifecycle import Lifecycle
from .link import Intake
from .running import Running
from .settle import Settler

__all__ = ["Dispatcher", "requeue_now"]

log = logging.getLogger(__name__)

Item = Message | Batch


class Settles(Protocol):
    """What a dispatcher needs of the :class:`~gnsqlite.consumer.settle.Settler`.

    The dispatcher types its settler as ``Settler | Settles``: the compiled
    build calls a :class:`Settler` directly (a native call, after a test of its
    class) and anything else, such as a test's fake, through Python.
    """

    def settle(self, message: Message, handler: Callable[[Message], Any]) -> None:
        """Run ``handler(message)`` and answer the message; blocks while it runs."""


# Final: the compiled build keeps it in a C global (a plain global is a dict lookup per item).
_Batch: Final = Batch


class _InFlight(Protocol):
    @property
    def max_in_flight(self) -> int: ...


class Planned(Protocol):
    """What a dispatcher reads of :class:`~gnsqlite.consumer.flow_control.FlowControl`:
    its planner's ``max_in_flight``, the default concurrency."""

    @property
    def planner(self) -> _InFlight: ...


def requeue_now(item: Item | None) -> None:
    """Requeue a message, or every message of a batch, at once and without backoff.

    Those already answered are left alone (``requeue`` returns ``False``).
    """
    for message in messages_of(item) if item is not None else ():
        message.requeue(0.0, backoff=False)


class Dispatcher(Intake):
    """Queues work and runs it in a pool of handler greenlets; see the module docstring.

    ``handler(message)`` is what a worker calls for a single message (the
    consumer sets it; it may change at any time); ``batcher`` runs batches.
    Once the ``lifecycle`` is closing, workers requeue what they take.
    """

    def __init__(
        self,
        settler: Settler | Settles,
        flow: Planned,
        lifecycle: Lifecycle,
        concurrency: int | None,
        batcher: Batcher | None = None,
    ) -> None:
        self._settler = settler
        self._flow = flow
        self._life = lifecycle
        self._concurrency = concurrency
        self.batcher = batcher
        self.handler: Callable[[Message], Any] | None = None
        self._queue: deque[Item | None] = deque()  # None: a worker's cue to end
        self._sleepers: deque[Waiter[Any]] = deque()  # idle workers, longest idle first
        self._wake_due = False  # _wake is scheduled on the hub
        self._loop: Any = None  # the hub's loop, which runs _wake (read once: not per message)
        # _wake bound once, with the loop, not per wake: in the compiled build each
        # binding makes a method object (some 400 instructions with its release,
        # once per message at max_in_flight 1). stop() lets it go (it holds self).
        self._wake_callback: Callable[[], None] | None = None
        self._workers = gevent.pool.Pool()
        self._cells: dict[Any, list[Item | None]] = {}  # worker -> its cell (see Running)
        #: worker greenlet -> what it handles now
        self.running: Running[Item] = Running(self._cells)

    @property
    def concurrency(self) -> int:
        """How many handler greenlets may run at once (default: ``max_in_flight``, at least 1)."""
        return self._concurrency or max(1, self._flow.planner.max_in_flight)

    @property
    def queued(self) -> int:
        """Items waiting for a worker."""
        return len(self._queue)

    def enqueue(self, item: Item) -> None:
        """Queue a message or a batch: wake an idle worker, or spawn one if needed. Never blocks."""
        self._queue.append(item)
        if self._sleepers:
            if not self._wake_due:
                self._wake_due = True
                self._schedule_wake()
        elif len(self._workers.greenlets) < self.concurrency:  # no worker idle
            self._workers.spawn(self._work)

    def drop(self, connection: object) -> None:
        """Remove ``connection``'s single messages from the queue (it died: nsqd redelivers)."""
        waiting = self._queue  # removing items wakes nobody
        # A batch keeps its messages of ``connection``: settle_batch skips them.
        if any(isinstance(m, Message) and m.connection is connection for m in waiting):
            kept = [
                m for m in waiting if not isinstance(m, Message) or m.connection is not connection
            ]
            waiting.clear()
            waiting.extend(kept)

    def requeue_queued(self) -> None:
        """Requeue everything still queued (closing). Never blocks."""
        queue = self._queue
        while queue:
            requeue_now(queue.popleft())

    def start_close(self) -> None:
        """Closing: requeue what is queued, and the caller's own item. Never blocks.

        Called from a worker (close() inside a handler), that worker's item
        is requeued now: it cannot be finished before the connections close.
        """
        requeue_now(self.running.get(gevent.getcurrent()))
        self.requeue_queued()

    def stop(self) -> None:
        """The workers ended (:meth:`kill`): forget what they ran, requeue what is queued."""
        self._cells.clear()
        self._wake_callback = None
        self.requeue_queued()

    def drain(self, timeout: float) -> None:
        """Let the workers finish what they run, then end them; blocks up to ``timeout`` s.

        Called from a worker (close() inside a handler), that worker is not
        waited for: it ends when its handler returns.
        """
        current = gevent.getcurrent()
        workers = [g for g in self._workers if g is not current]
        for _ in workers:
            self._queue.append(None)
        if self._sleepers and not self._wake_due:
            self._wake_due = True
            self._schedule_wake()
        gevent.joinall(workers, timeout=max(0.0, timeout))

    def kill(self) -> None:
        """End every worker but the calling one; blocks until they ended."""
        current = gevent.getcurrent()
        gevent.killall([g for g in self._workers if g is not current], block=True)

    def _schedule_wake(self) -> None:
        loop = self._loop
        wake = self._wake_callback
        if loop is None or wake is None:
            loop = self._loop = get_hub().loop
            wake = self._wake_callback = self._wake
        loop.run_callback(wake)

    def _wake(self) -> None:
        """In the hub: switch to idle workers in turn while items are left."""
        self._wake_due = False
        queue = self._queue
        sleepers = self._sleepers
        while queue and sleepers:
            # Returns when the worker waits again: idle (the queue is empty)
            # or blocked in its handler (the next idle worker takes over).
            sleepers.popleft().switch(None)

    def _work(self) -> None:
        me = gevent.getcurrent()
        cell: list[Item | None] = [None]  # what this worker handles now (see Running)
        cells = self._cells
        cells[me] = cell
        try:
            self._work_on(cell)
        finally:
            if cells.get(me) is cell:  # stop() may have cleared them
                del cells[me]

    def _work_on(self, cell: list[Item | None]) -> None:
        queue = self._queue
        sleepers = self._sleepers
        life = self._life
        settler = self._settler
        hub = get_hub()  # handed to each Waiter: no thread-local read per wait
        while True:
            if not queue:
                # Idle: wait for _wake, then look again.
                waiter: Waiter[Any] = Waiter(hub)
                sleepers.append(waiter)
                try:
                    waiter.get()
                except BaseException:  # killed while idle
                    if waiter in sleepers:
                        sleepers.remove(waiter)
                    raise
                continue
            item = queue.popleft()
            if item is None:
                return
            if life.closing:
                requeue_now(item)
                continue
            cell[0] = item
            try:
                if type(item) is _Batch:
                    if self.batcher is not None:
                        self.batcher.run(item)
                else:
                    handler = self.handler
                    if handler is None:
                        raise RuntimeError("the consumer set no handler")
                    settler.settle(item, handler)  # type: ignore[arg-type]
            finally:
                cell[0] = None
            if life.closing:
                return  # close() requeues what is still queued
