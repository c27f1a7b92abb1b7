"""Where the drop-in meets the program's asyncio loop (tornado's IOLoop runs on it).

pynsq programs live on tornado's IOLoop; the drop-in lives on gevent's hub.
Both run in one thread, so one of them has to give the other turns. Three
cases, each handled here:

* **The program calls** :func:`~gnsqlite.nsq.run`: gevent is the outer loop,
  and :func:`pump` runs the asyncio loop one iteration at a time in a
  greenlet, so the program's ``PeriodicCallback`` still fires.
* **The program runs the loop itself**: tornado's (``IOLoop.current().start()``,
  a tornado web app) or a plain asyncio one (``asyncio.run(main())``, no
  tornado imported). A Reader or Writer built while tornado is imported, or
  while an asyncio loop runs, puts one callback on that loop
  (:func:`schedule_start`). When the loop runs it, the clients start, and
  from then on the loop gives gevent a slice of :data:`GEVENT_SLICE` seconds
  on every turn, so connections, handlers and heartbeats run while the loop
  serves its own tasks and sockets between slices.
* **A handler returns a coroutine or a Future** (``async def``,
  ``@tornado.gen.coroutine``), or code awaits ``Writer.pub()``:
  :func:`resolve` blocks the handler's greenlet until it is done, driving
  the loop with :func:`pump` when nothing else does.

And one the other way round: a coroutine on a loop the program runs calls
``close()``, which must not block that loop (the handlers it waits for may
await on it): it runs the close in a greenlet and gives
the coroutine a Future to await (:func:`off_the_loop`).

gnsqlite never imports tornado: it only uses the asyncio loop that tornado
(when the program imported it) runs on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import gevent
import gevent.event

__all__ = [
    "CANCEL_TIMEOUT",
    "GEVENT_SLICE",
    "PUMP_INTERVAL",
    "hold_pump",
    "loop_running",
    "off_the_loop",
    "pump",
    "resolve",
    "schedule_start",
    "tornado_in_use",
]

log = logging.getLogger(__name__)

#: Seconds between two iterations of the asyncio loop when gevent drives it.
PUMP_INTERVAL = 0.005
#: Seconds gevent runs on each turn of a loop the program runs itself.
GEVENT_SLICE = 0.005
#: Seconds a killed :func:`resolve` waits for its coroutine to take the cancellation.
CANCEL_TIMEOUT = 1.0


def tornado_in_use() -> bool:
    """``True`` when the program imported ``tornado.ioloop``."""
    return "tornado.ioloop" in sys.modules


def loop_running() -> bool:
    """``True`` when this thread's asyncio loop is running (``asyncio.run()``, an IOLoop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _current_loop() -> asyncio.AbstractEventLoop:
    """The thread's asyncio loop (tornado's IOLoop runs on it). Does not block.

    The running loop if there is one, else the thread's current loop. A
    thread with none (any thread but the main one, or the main one after
    ``asyncio.run()`` returned), or whose loop was closed, gets a new loop
    made its current one, as tornado's ``IOLoop.current()`` does: pynsq's
    coroutines run there.
    """
    with contextlib.suppress(RuntimeError):
        return asyncio.get_running_loop()
    loop: asyncio.AbstractEventLoop | None = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with contextlib.suppress(RuntimeError):  # asyncio's "there is no current event loop"
            loop = asyncio.get_event_loop_policy().get_event_loop()
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
    return loop


class _Pump:
    """The one greenlet that drives the asyncio loop while someone needs it."""

    def __init__(self) -> None:
        self.holders = 0
        self.iterating = False  # inside the pump's own turn of the loop
        self.greenlet: gevent.Greenlet[..., None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None  # the loop the greenlet drives

    def driven_elsewhere(self, loop: asyncio.AbstractEventLoop) -> bool:
        """The program runs ``loop`` itself (we are inside one of its callbacks)."""
        return loop.is_running() and not self.iterating

    @contextlib.contextmanager
    def held(self, loop: asyncio.AbstractEventLoop) -> Iterator[None]:
        self.holders += 1
        if self.greenlet is None or self.greenlet.dead or self.loop is not loop:
            self.loop = loop  # a greenlet left driving another loop ends at its next turn
            self.greenlet = gevent.spawn(self.run, loop)
        try:
            yield
        finally:
            self.holders -= 1

    def run(self, loop: asyncio.AbstractEventLoop) -> None:
        while self.holders > 0 and self.loop is loop and not loop.is_closed():
            if loop.is_running():  # the program's own turn is under way: wait for it
                gevent.sleep(PUMP_INTERVAL)
                continue
            self.iterating = True
            try:
                loop.call_soon(loop.stop)
                loop.run_forever()  # one iteration: what is ready, then stop
            finally:
                self.iterating = False
            gevent.sleep(PUMP_INTERVAL)
        if self.greenlet is gevent.getcurrent():
            self.greenlet = None


_pump = _Pump()


@contextlib.contextmanager
def hold_pump() -> Iterator[None]:
    """Drive the thread's asyncio loop from a greenlet while the block runs.

    :func:`~gnsqlite.nsq.run` holds it when the program imported tornado.
    Does nothing when the program runs the loop itself.
    """
    loop = _current_loop()
    if _pump.driven_elsewhere(loop):
        yield
        return
    with _pump.held(loop):
        yield


def pump() -> None:
    """Drive the asyncio loop until the calling greenlet is killed. Blocks."""
    with hold_pump():
        gevent.sleep(float("inf"))


def resolve(awaitable: Awaitable[Any]) -> Any:
    """Wait for ``awaitable`` (a coroutine, a Future, any awaitable) and return its result.

    Blocks the calling greenlet, never the hub; raises what the awaitable
    raised. It runs on the thread's asyncio loop, driven by the program if
    it runs that loop, else by :func:`pump` (see :func:`_current_loop`
    for the loop it takes). If the greenlet is killed meanwhile, the
    awaitable is cancelled (``CancelledError`` at its ``await``) and given
    up to :data:`CANCEL_TIMEOUT` seconds to end.
    """
    if isinstance(awaitable, asyncio.Future) and awaitable.done():
        return awaitable.result()
    loop = _current_loop()
    future = asyncio.ensure_future(awaitable, loop=loop)
    done: gevent.event.AsyncResult[Any] = gevent.event.AsyncResult()

    def copy(finished: asyncio.Future[Any]) -> None:
        if finished.cancelled():
            done.set_exception(asyncio.CancelledError(f"{awaitable!r} was cancelled"))
        elif finished.exception() is not None:
            done.set_exception(finished.exception())  # type: ignore[arg-type]
        else:
            done.set(finished.result())

    future.add_done_callback(copy)
    if _pump.driven_elsewhere(loop):
        return _wait(future, done)
    with _pump.held(loop):
        return _wait(future, done)


def _wait(future: asyncio.Future[Any], done: gevent.event.AsyncResult[Any]) -> Any:
    """``done``'s value; if the greenlet is killed first, cancel ``future``. Blocks."""
    try:
        return done.get()
    except BaseException:  # GreenletExit, a gevent Timeout: the waiter is gone
        if not future.done():
            future.cancel()
            done.wait(CANCEL_TIMEOUT)  # the loop's next turn runs the cancellation
        raise


class _Starter:
    """Starts clients from a loop the program runs, and then gives gevent its slices."""

    def __init__(self) -> None:
        self.pending: list[Callable[[], None]] = []
        self.slicing: asyncio.AbstractEventLoop | None = None
        #: The greenlet that runs the loop the program runs (usually the main one).
        self.loop_greenlet: Any = None

    def schedule(self, start: Callable[[], None] | None) -> None:
        loop = _current_loop()
        if start is not None:
            self.pending.append(start)
        loop.call_soon(self.started, loop)

    def started(self, loop: asyncio.AbstractEventLoop) -> None:
        if not _pump.driven_elsewhere(loop):  # gevent drives this loop: run() starts clients
            self.pending.clear()
            return
        self.loop_greenlet = gevent.getcurrent()
        starts, self.pending = self.pending, []
        for start in starts:
            gevent.spawn(start)
        if self.slicing is not loop:
            self.slicing = loop
            log.debug("the program runs its IOLoop: gevent gets %.3f s a turn", GEVENT_SLICE)
            loop.call_soon(self.slice, loop)

    def slice(self, loop: asyncio.AbstractEventLoop) -> None:
        if _pump.iterating:  # gevent drives the loop now (run() after IOLoop.start())
            self.slicing = None
            return
        gevent.sleep(GEVENT_SLICE)
        loop.call_soon(self.slice, loop)


_starter = _Starter()


def schedule_start(start: Callable[[], None] | None = None) -> None:
    """Call ``start`` (in a greenlet) when the program runs its loop itself.

    Every Reader and Writer calls this when it is built; it acts when
    tornado is imported or an asyncio loop is running (a client built in a
    coroutine under ``asyncio.run()``), else does nothing. If the program
    calls :func:`~gnsqlite.nsq.run` instead, run() starts the client and the
    callback does nothing. Without ``start`` it only makes sure that loop, when the
    program runs it, gives gevent its turns (an ``AsyncConn`` connecting).
    Does not block; opens nothing.
    """
    if tornado_in_use() or loop_running():
        _starter.schedule(start)


def off_the_loop(work: Callable[[], None]) -> asyncio.Future[None] | None:
    """Run ``work``; from a loop the program runs, in a greenlet, returning a Future.

    Anywhere but a callback or coroutine of an asyncio loop the program
    runs itself, this calls ``work`` and returns ``None`` once it returned
    (it blocks as ``work`` does). From such a callback or coroutine,
    blocking would stop the loop and whatever ``work`` waits for on it, so
    ``work`` runs in a greenlet and this returns at once a Future of that
    loop, done when ``work`` returned (or failed with what it raised), for
    the coroutine to ``await``; the work goes on whether it is awaited or not.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if (
        loop is None
        or not _pump.driven_elsewhere(loop)
        or gevent.getcurrent() is not _starter.loop_greenlet
    ):
        work()
        return None
    future: asyncio.Future[None] = loop.create_future()

    def copy(done: gevent.Greenlet[[], None]) -> None:  # in the hub
        if not loop.is_closed():
            loop.call_soon(_settle, future, done.exception)

    gevent.spawn(work).rawlink(copy)
    return future


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
