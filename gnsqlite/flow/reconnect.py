"""Reconnecting: how long to wait before trying a failed address again.

:class:`Reconnect` is the one policy the Consumer, the Producer and lookupd
discovery share: after the *n*-th failure in a row it waits a jittered,
capped exponential delay,

    ceiling = min(max_interval, interval * 2 ** (n - 1))
    delay   = a uniform draw in [ceiling / 2, ceiling]

The jitter spreads the reconnects of many clients after one nsqd restarts.
The exponent is bounded where the ceiling reaches ``max_interval`` (the
growth is computed with :func:`math.ldexp` from that bound), so any run of
failures, thousands long, gives ``max_interval`` instead of overflowing a
float.

Failures are counted per key (an address, or ``"lookupd"``);
:meth:`Reconnect.succeeded` starts the count again. Nothing here reads a
clock or sleeps: the caller schedules the returned delay.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable

__all__ = ["Reconnect", "reconnect_ceiling"]


def reconnect_ceiling(failures: int, interval: float, max_interval: float) -> float:
    """``min(max_interval, interval * 2 ** (failures - 1))`` seconds, for any ``failures`` >= 1.

    Never raises ``OverflowError``: the exponent stops where the cap is reached.
    """
    if failures < 1:
        return 0.0
    # The smallest exponent whose growth reaches the cap; any larger one gives the cap too.
    ratio = max_interval / interval
    bound = max(0, math.ceil(math.log2(ratio))) if math.isfinite(ratio) else 1100
    try:
        grown = math.ldexp(interval, min(failures - 1, bound))
    except OverflowError:  # only with an infinite or near-infinite cap
        return max_interval
    return min(max_interval, grown)


class Reconnect:
    """Per-key failure counts and the delay before the next attempt, in seconds.

    ``interval`` (more than 0) is the first ceiling, ``max_interval`` (at
    least ``interval``) the largest; the config classes
    (:class:`~gnsqlite.config.ConsumerConfig`,
    :class:`~gnsqlite.config.ProducerConfig`) check both before they get
    here. ``rng`` draws the jitter (seed it in tests).
    """

    def __init__(
        self, interval: float, max_interval: float, rng: random.Random | None = None
    ) -> None:
        self.interval = float(interval)
        self.max_interval = float(max_interval)
        self.rng = rng if rng is not None else random.Random()
        self._failures: dict[Hashable, int] = {}

    def __repr__(self) -> str:
        return f"<Reconnect {self.interval}..{self.max_interval} s failing={len(self._failures)}>"

    def failures(self, key: Hashable) -> int:
        """How many attempts on ``key`` failed in a row (0 after a success)."""
        return self._failures.get(key, 0)

    def delay(self, failures: int) -> float:
        """The jittered delay after ``failures`` failures in a row, in seconds."""
        return reconnect_ceiling(failures, self.interval, self.max_interval) * self.rng.uniform(
            0.5, 1.0
        )

    def failed(self, key: Hashable) -> float:
        """Count one more failure of ``key``; returns the delay before the next attempt."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        return self.delay(failures)

    def succeeded(self, key: Hashable) -> None:
        """``key`` connected: its next failure waits the shortest delay again."""
        self._failures.pop(key, None)
