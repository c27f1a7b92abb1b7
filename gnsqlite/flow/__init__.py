"""Pure flow-control policies: RDY distribution, backoff and reconnect delays.

Nothing here reads a clock, sleeps, logs or touches a socket: every method
takes ``now`` (float seconds, any monotonic origin) where time matters and
returns what to send, so the policies are tested with a fake clock and the
Consumer only carries the decisions out.
"""

from __future__ import annotations

from .backoff import (
    Backoff,
    BackoffStrategy,
    ExponentialBackoff,
    FullJitterBackoff,
    Pause,
    Probe,
    Resume,
    make_backoff_strategy,
)
from .rdy import LinkPlan, RdyPlanner
from .reconnect import Reconnect, reconnect_ceiling

__all__ = [
    "Backoff",
    "BackoffStrategy",
    "LinkPlan",
    "ExponentialBackoff",
    "FullJitterBackoff",
    "Pause",
    "Probe",
    "RdyPlanner",
    "Reconnect",
    "Resume",
    "make_backoff_strategy",
    "reconnect_ceiling",
]
