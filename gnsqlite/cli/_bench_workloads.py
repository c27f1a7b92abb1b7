"""The publish workloads of ``gnsqlite bench``, defined once for every client measured.

Below both :mod:`gnsqlite.cli.bench` (gnsqlite's runs) and
:mod:`gnsqlite.cli._bench_peers` (pynsq's and gnsq's), which import it and
not each other.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import gevent

__all__ = ["BATCH", "CONCURRENCY", "PUBLISH_MODES", "time_publishes"]

#: Publishing greenlets in the ``pipelined`` mode.
CONCURRENCY = 50
#: Messages per MPUB in the ``mpub`` mode.
BATCH = 100
PUBLISH_MODES = ("sequential", "pipelined", "mpub")


def time_publishes(
    publish: Callable[[str, bytes], Any],
    multi_publish: Callable[[str, list[bytes]], Any],
    topic: str,
    body: bytes,
    count: int,
    mode: str,
) -> float:
    """Seconds to publish ``count`` messages in ``mode`` with blocking calls; blocks.

    The one definition of the publish workloads, shared by gnsqlite's and
    gnsq's runs: ``publish(topic, body)`` and ``multi_publish(topic, bodies)``
    each block until nsqd answers.
    """
    publish(topic, body)  # warm up: connection and topic exist
    start = time.perf_counter()
    if mode == "sequential":
        for _ in range(count):
            publish(topic, body)
    elif mode == "pipelined":

        def publisher() -> None:
            for _ in range(count // CONCURRENCY):
                publish(topic, body)

        jobs = [gevent.spawn(publisher) for _ in range(CONCURRENCY)]
        gevent.joinall(jobs, raise_error=True)
    else:
        batch = [body] * BATCH
        for _ in range(count // BATCH):
            multi_publish(topic, batch)
    return time.perf_counter() - start
