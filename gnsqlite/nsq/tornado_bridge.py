"""Keep a program's tornado callbacks running while :func:`~gnsqlite.nsq.run` runs.

pynsq programs often schedule work on tornado's IOLoop
(``tornado.ioloop.PeriodicCallback(pub_message, 1000).start()``). When such a
program moves to the drop-in, nothing runs that loop any more, so
:func:`pump` runs it in a greenlet: one loop iteration, then a short
cooperative sleep, until killed. It is used only when the program itself
imported tornado; gnsqlite never imports tornado otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import warnings

import gevent

__all__ = ["PUMP_INTERVAL", "pump", "tornado_in_use"]

log = logging.getLogger(__name__)

#: Seconds between two iterations of tornado's loop.
PUMP_INTERVAL = 0.01


def tornado_in_use() -> bool:
    """``True`` when the program imported ``tornado.ioloop``."""
    return "tornado.ioloop" in sys.modules


def _current_loop() -> asyncio.AbstractEventLoop | None:
    """The thread's asyncio loop (tornado's IOLoop runs on it), or ``None``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            return asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:  # no loop was ever made: nothing was scheduled on it
            return None


def pump(interval: float = PUMP_INTERVAL) -> None:
    """Run the thread's asyncio loop (tornado's IOLoop) one iteration at a time.

    Blocks the calling greenlet until it is killed; never blocks the hub.
    """
    loop = _current_loop()
    if loop is None:
        return
    log.debug("running tornado's IOLoop every %.3f s alongside gevent", interval)
    while True:
        if loop.is_closed():
            return
        loop.call_soon(loop.stop)
        loop.run_forever()
        gevent.sleep(interval)
