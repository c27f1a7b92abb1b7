"""The consumers a streaming source runs in its hub thread, and Spark's read limit.

Shared by both sources (:mod:`gnsqlite.spark.source`,
:mod:`gnsqlite.spark.wal_source`): the :class:`~gnsqlite.consumer.Consumer`
built from the source's options, the RDY budget shared over several of them,
waiting for their subscription, closing them, and stopping the hub thread
they run in. The consumer package is imported when a consumer is built,
not with this module: the readOn=executors source's process uses only the
read limit and the hub's stop, and imports what it needs at its start-up.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gevent
import gevent.event

from ._hub import HubThread
from .options import SourceOptions

if TYPE_CHECKING:
    from ..consumer import Consumer
    from ..message import Message

try:  # PySpark 4.2+: admission control and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - PySpark 4.0/4.1
    ReadLimit = ReadAllAvailable = ReadMaxRows = ReadMinRows = None  # type: ignore[assignment,misc]
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]

__all__ = [
    "HOLD_WAIT",
    "ReadMaxRows",
    "SupportsTriggerAvailableNow",
    "await_fill",
    "close_all",
    "hold_first_batch",
    "rdy_shares",
    "read_limit",
    "set_rdy",
    "source_consumer",
    "stop_in_hub",
    "wait_subscribed",
]

log = logging.getLogger(__name__)

#: Seconds ``latestOffset`` waits for a held batch to fill before answering "nothing yet":
#: Spark asks again at once (every 10-30 ms), each time at a CPU cost to ingestion.
HOLD_WAIT = 0.2


def hold_first_batch(
    has_rows: Callable[[], bool],
    grown: gevent.event.Event,
    filling: Callable[[], bool],
    await_fill: Callable[[], object],
    done: Callable[[], bool],
    settle: float = 0.0,
) -> None:
    """A query's first ``latestOffset``: wait for rows, then while a flood fills the batch.

    Spark runs a new query's first batch even on "no new data", so answering
    "not yet" would cost a batch of nothing. This waits up to
    :data:`HOLD_WAIT` s for ``has_rows()`` (``grown`` is set as rows come; a
    backlog's arrive within milliseconds of the subscription), then
    ``settle`` s more (to see the rate they arrive at), then calls
    ``await_fill()`` while ``filling()`` (which ends at ``walBatchDelay``),
    stopping early once ``done()``. Blocks, in the hub.
    """
    deadline = time.monotonic() + HOLD_WAIT
    while not has_rows():
        left = deadline - time.monotonic()
        if left <= 0 or done():
            return
        grown.clear()
        grown.wait(left)
    if settle > 0:
        gevent.sleep(settle)
    while filling() and not done():
        await_fill()


def await_fill(
    filling: Callable[[], bool], grown: gevent.event.Event, step: float, done: Callable[[], bool]
) -> bool:
    """Wait (in the hub) up to :data:`HOLD_WAIT` s while ``filling()``; ``True`` once it ends.

    ``grown`` is set as messages come; ``filling()`` is asked again then,
    and at least every ``step`` s. ``False`` at the deadline, or once
    ``done()`` (the source stopping or failed) while still filling.
    """
    deadline = time.monotonic() + HOLD_WAIT
    while filling():
        left = deadline - time.monotonic()
        if left <= 0 or done():
            return False
        grown.clear()
        grown.wait(min(left, step))
    return True


def rdy_shares(max_in_flight: int, connections: int) -> list[int]:
    """``max_in_flight`` cut into ``connections`` shares differing by at most one message."""
    n = connections
    return [max_in_flight // n + (1 if i < max_in_flight % n else 0) for i in range(n)]


def set_rdy(consumers: Sequence[Consumer], max_in_flight: int) -> None:
    """Share ``max_in_flight`` (0: RDY 0 everywhere) among ``consumers``; in the hub."""
    for consumer, share in zip(consumers, rdy_shares(max_in_flight, len(consumers)), strict=True):
        consumer.set_max_in_flight(share)


def close_all(consumers: Sequence[Consumer], timeout: float) -> None:
    """Close ``consumers`` at once, each waiting up to ``timeout`` s (blocks, in the hub)."""
    gevent.joinall([gevent.spawn(c.close, timeout) for c in consumers], raise_error=True)


def wait_subscribed(consumers: Sequence[Consumer], timeout: float) -> bool:
    """Wait (in the hub) until every consumer subscribed; ``True`` if they did in ``timeout`` s.

    ``False`` (after ``timeout``) while one has no connection yet, or with no consumer.
    """
    deadline = time.monotonic() + timeout
    waited = [c.connected.wait(max(0.0, deadline - time.monotonic())) for c in consumers]
    return bool(waited) and all(waited)


def source_consumer(
    options: SourceOptions,
    on_message: Callable[[Message], None] | None,
    max_in_flight: int | None = None,
    *,
    on_batch: Callable[[list[Message]], None] | None = None,
    batch_size: int | None = None,
    batch_timeout: float | None = None,
) -> Consumer:
    """The Consumer a streaming source runs (in its hub thread): the source's options, no backoff.

    ``on_message`` handles one message at a time; or, with ``on_message``
    ``None``, ``on_batch`` gets lists of at most ``batch_size`` messages
    (the library's batch path, :mod:`gnsqlite.consumer.batch`: no handler greenlet
    switch per message; a batch goes out after ``batch_timeout`` seconds at
    the latest). ``max_in_flight`` overrides the option's (one consumer's
    share of it). Constructing it opens nothing; the caller starts it.
    """
    from ..consumer import Consumer

    return Consumer(
        options.topic,
        options.channel,
        on_message,
        nsqd_tcp_addresses=options.nsqd_tcp_addresses,
        lookupd_http_addresses=options.lookupd_http_addresses,
        connection_config=options.connection,
        backoff=None,
        max_in_flight=options.max_in_flight if max_in_flight is None else max_in_flight,
        max_attempts=options.max_attempts,
        concurrency=4 if on_batch is None else 1,
        batch_handler=on_batch,
        batch_size=batch_size,
        batch_timeout=batch_timeout,
        **options.consumer,
    )


def stop_in_hub(
    owner: object, hub: HubThread | None, stop: Callable[[], None], timeout: float
) -> None:
    """Run ``stop`` in ``hub`` (waiting at most ``timeout`` s), then end the hub thread.

    Blocks; never raises: a failed stop is logged, and nsqd requeues what the
    closed connections held.
    """
    if hub is None or not hub.running:
        return
    try:
        hub.call(stop, timeout=timeout)
    except Exception:
        log.exception("%r: stopping failed; nsqd requeues what the closed connections held", owner)
    hub.stop()


def read_limit(limit: Any, default: int) -> tuple[int | None, int | None]:
    """Spark's read limit as ``(max_rows, min_rows)``; ``None`` means no bound."""
    if ReadAllAvailable is not None and isinstance(limit, ReadAllAvailable):
        return None, None
    if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
        return limit.max_rows, None
    if ReadMinRows is not None and isinstance(limit, ReadMinRows):
        return None, limit.min_rows
    return default, None
