"""SIGTERM in a streaming source's process: give the held messages back, then exit.

Spark ends the Python process holding a query's source in two ways at nearly
the same moment: it sends SIGTERM and it closes the process's socket. Either
one can arrive first. The closed socket makes Spark's runner call the
source's ``stop()``. SIGTERM would kill Python on the spot, so
:func:`exit_on_sigterm` turns it into ``SystemExit``. Left at that, a SIGTERM
arriving while ``stop()`` waits for its hub raised ``SystemExit`` inside
``stop()``. That cut the give-back short, and the messages stayed in flight at
nsqd until its ``msg_timeout``.

So this module's handler never interrupts a stop:

* if a source's ``stop()`` is running in the main thread (where Python runs
  signal handlers), the handler only records the signal; ``stop()`` finishes,
  then raises ``SystemExit``;
* otherwise the handler stops every started source of the process itself,
  then raises ``SystemExit``. This also covers a SIGTERM that lands after
  the socket closed but before Spark's runner reached ``stop()``.

A source calls :func:`started` once it has a hub, and wraps its
``stop()`` in :func:`stopping`. The claim in :func:`stopping` is a single
dict operation, so a stop begun by the handler and one begun by Spark's runner
never both run.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from typing import Any, Protocol

__all__ = ["exit_on_sigterm", "started", "stopping"]

log = logging.getLogger(__name__)


class _Stoppable(Protocol):
    def stop(self) -> None: ...


class _State:
    """The process's started sources and the main thread's stops in progress."""

    def __init__(self) -> None:
        self.sources: dict[int, _Stoppable] = {}  # by id(); a source leaves when it stops
        self.main_depth = 0  # stop()s running in the main thread
        self.exit_code: int | None = None  # a SIGTERM that came during such a stop


_state = _State()


def started(source: _Stoppable) -> None:
    """Record ``source`` (now holding a hub) as one a SIGTERM must stop. Does not block.

    Installs the handler too (:func:`exit_on_sigterm`), if it can.
    """
    _state.sources[id(source)] = source
    exit_on_sigterm()


@contextlib.contextmanager
def stopping(source: _Stoppable) -> Iterator[bool]:
    """Shield a source's stop from SIGTERM; yields ``True`` if this call claimed the stop.

    ``False`` means the source was never started or another call already
    stops it: the caller then has nothing to do. In the main thread, a
    SIGTERM arriving inside the block raises ``SystemExit`` when the
    block ends, not in the middle of it.
    """
    main = threading.current_thread() is threading.main_thread()
    if main:
        _state.main_depth += 1
    try:
        yield _state.sources.pop(id(source), None) is not None
    finally:
        if main:
            _state.main_depth -= 1
            code = _state.exit_code
            if _state.main_depth == 0 and code is not None:
                _state.exit_code = None
                raise SystemExit(code)


def _on_sigterm(signum: int, frame: Any) -> None:
    # From now on the process is exiting: a repeated SIGTERM (Spark sends
    # two) changes nothing.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if _state.main_depth > 0:
        _state.exit_code = 128 + signum
        return
    for source in list(_state.sources.values()):
        try:
            source.stop()
        except Exception:
            log.exception("%r: stopping on SIGTERM failed; nsqd requeues what it held", source)
    raise SystemExit(128 + signum)


def exit_on_sigterm() -> None:
    """On SIGTERM, stop the process's started sources, then raise ``SystemExit``.

    Installed only if SIGTERM still has its default action (a handler the
    application installed is left alone) and only from the main thread
    (the only one that can install a handler). Without it, Python would
    die on Spark's SIGTERM and the messages the source holds would stay in
    flight at nsqd until ``msg_timeout``. Does not block.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
