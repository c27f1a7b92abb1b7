"""One connection's RDY state, the reasons it holds its count, and the timing bounds.

The pieces of :mod:`gnsqlite.flow.rdy` that do not need the planner: the
guide's constants, :class:`LinkPlan`, :data:`REASONS`, the rotation bounds
(:func:`rotation_bound`, :func:`turn_length`) and the water-filling share
(:func:`water_fill`). Pure: no clock, no I/O; times are float seconds.
"""

from __future__ import annotations

import math
from collections.abc import Sized
from dataclasses import dataclass
from typing import Final

__all__ = [
    "DEMAND_HEADROOM",
    "GRANT_STEP_RATIO",
    "NEW_EVALUATIONS",
    "REASONS",
    "STARVATION_RATIO",
    "Command",
    "LinkPlan",
    "may_hold",
    "rotation_bound",
    "starved",
    "turn_length",
    "water_fill",
]

#: The guide's constant: a connection is starved when its in-flight count
#: reaches 85% of its last RDY, anticipating starvation rather than waiting.
STARVATION_RATIO: Final = 0.85
#: Budget freed by answers is handed on in steps of at least this share of
#: the receiving connection's target (or all it still lacks), not one by one.
GRANT_STEP_RATIO: Final = 0.25
#: Headroom over a connection's peak in-flight count when it is not hungry.
DEMAND_HEADROOM: Final = 1.25
#: Evaluations a new connection that received nothing keeps its share reserved.
NEW_EVALUATIONS: Final = 1

#: Why a connection holds its RDY count (:attr:`LinkPlan.reason`).
REASONS = {
    "new": "connected recently, nothing received yet: RDY 1, its even share kept in reserve",
    "even": "an even share of max_in_flight",
    "demand": "more than an even share: it uses its RDY fully and others leave theirs",
    "idle": "less than an even share: it used little of its RDY in the last evaluation",
    "max_rdy_count": "capped by nsqd's max_rdy_count",
    "rotation": "holds the scarce RDY (max_in_flight < connections) for its turn: one"
    " rdy_redistribute_interval while others wait with messages, else up to low_rdy_timeout",
    "waiting": "waits its turn for the scarce RDY (max_in_flight < connections)",
    "backoff": "RDY 0 during a backoff window",
    "probe": "RDY 1 to test the waters after a backoff window",
    "paused": "max_in_flight is 0",
}

Command = tuple[str, int]


def starved(in_flight: int, last_rdy: int) -> bool:
    """The guide's *starved*: ``in_flight`` messages reached 85% of the RDY count last sent.

    The one statement of the rule; the planner's per-message paths carry a
    copy that names this function, and ``tests/unit/test_flow_rules.py``
    checks that the two agree.
    """
    return in_flight > 0 and in_flight >= last_rdy * STARVATION_RATIO


def may_hold(last_rdy: int, in_flight: int, reserve: int = 0) -> int:
    """What nsqd may hold in flight for one connection: what it takes of the budget.

    Its RDY, or more while it holds more messages (``in_flight``), or, after
    its RDY was lowered, ``reserve`` (the old count less the answers sent
    since: messages may still be on the wire).
    """
    # Not max(): the compiled build calls the builtin with three boxed ints for it,
    # about 1,700 instructions a call (callgrind), and the planner's budget passes
    # call this twice a connection.
    most = last_rdy if last_rdy >= in_flight else in_flight
    return most if most >= reserve else reserve


def rotation_bound(
    connections: int,
    max_in_flight: int,
    low_rdy_timeout: float,
    interval: float,
    known: bool = True,
) -> float:
    """The longest a connection waits for scarce RDY, in seconds (see the module docstring).

    ``interval`` is the time between evaluations (``rdy_redistribute_interval``).
    ``known``: the bound for a connection known to have messages (it received
    during its last turn, or never had one); ``False``: for one that found
    none in its last turn and has some since. The time the givers take to
    answer the message they hold is not included. 0 when RDY is not scarce.
    With the defaults (30 s, 1 s), 3 connections and ``max_in_flight=1``: 3 s
    (known), 61 s (not known).
    """
    if max_in_flight <= 0 or connections <= max_in_flight:
        return 0.0
    rounds = math.ceil((connections - max_in_flight) / max_in_flight)
    return rounds * turn_length(low_rdy_timeout, interval, known)


def turn_length(low_rdy_timeout: float, interval: float, short: bool = True) -> float:
    """The longest a connection holds scarce RDY, in seconds.

    A turn ends at the first evaluation at which it has lasted its length
    less half an ``interval`` (rounding to the nearest evaluation keeps a late
    or early timer from adding a whole interval). Its length is
    ``low_rdy_timeout``, or, when ``short`` (another connection known to have
    messages waits), one ``interval`` if that is less.
    """
    length = min(interval, low_rdy_timeout) if short else low_rdy_timeout
    return length + interval / 2


@dataclass
class LinkPlan:
    """The RDY planner's view of one link (a subscribed connection): its flow state.

    Not a second record of the connection: the consumer's
    :class:`~gnsqlite.consumer.link.Link` is that, and holds this as its
    ``plan``; the planner keeps it by name in :attr:`RdyPlanner.conns`.

    Its in-flight count is not kept here: it is the size of ``held``, the
    caller's live collection of the connection's received and unanswered
    messages (the consumer's :attr:`Link.unanswered
    <gnsqlite.consumer.link.Link.unanswered>`), the one record of them.
    """

    name: str
    max_rdy_count: int
    connected_at: float
    #: The caller's collection of messages received and not yet answered:
    #: read (``len``), never changed, here.
    held: Sized = ()
    last_rdy: int = 0  # the RDY count last sent
    warmed: bool = False  # received a message since it connected
    last_message_at: float | None = None  # when the last message arrived
    rdy_handed_at: float | None = None  # when it last went from RDY 0 to more
    waiting_since: float = 0.0  # when it last lost its RDY in full flow (or connected)
    target: int = 0  # the count the policy wants it to have
    reason: str = "new"  # why it holds its count: a key of REASONS
    evaluations: int = 0  # evaluations since it connected
    hungry: bool = True  # used its RDY fully in the last window
    ask: int = 1  # what it asks for when not hungry
    window_peak: int = 0  # the highest in-flight count in this window
    window_saturated: bool = False  # starved at some point in this window
    #: In its planner's set of starved connections (the planner keeps the two together).
    listed_starved: bool = False
    reserve: int = 0  # what nsqd may still hold after its RDY was lowered (see committed)
    #: Scarce RDY: it received during its last turn and was not idle at its end,
    #: or never had one (presumed to have messages waiting): while one waits
    #: so, turns last one evaluation.
    eager: bool = True
    #: Still one of its planner's connections: cleared by ``RdyPlanner.remove``,
    #: so a caller holding this record needs no lookup by name to know.
    active: bool = True

    @property
    def in_flight(self) -> int:
        """Messages received and not yet answered: the size of ``held``."""
        return len(self.held)

    @property
    def rdy(self) -> int:
        """What its RDY still allows: nsqd's window, the last RDY less the in-flight count.

        Below 0 while it holds more than a lowered RDY (messages sent before
        the change arrived).
        """
        return self.last_rdy - len(self.held)

    @property
    def starved(self) -> bool:
        """The guide's ``is_starved`` test for this connection (:func:`starved`)."""
        return starved(len(self.held), self.last_rdy)

    @property
    def committed(self) -> int:
        """What nsqd may hold in flight for it: what it takes of the budget in full flow.

        Its RDY, or more while it holds more messages; after its RDY was
        lowered, the old count less the answers sent since (nsqd may have sent
        messages not received yet), until the next evaluation.
        """
        return may_hold(self.last_rdy, len(self.held), self.reserve)

    @property
    def turn_start(self) -> float:
        """When its scarce RDY turn began (handed RDY, or connected holding it)."""
        return self.rdy_handed_at if self.rdy_handed_at is not None else self.connected_at

    def idle_since(self) -> float:
        """The start of its idle clock: its last message, connection or RDY hand-over."""
        return max(
            t
            for t in (self.connected_at, self.last_message_at, self.rdy_handed_at)
            if t is not None
        )


def water_fill(asks: dict[str, int], caps: dict[str, int], budget: int) -> dict[str, int]:
    """Share ``budget`` over the names of ``asks``: small asks met in full, the rest even.

    Asks are taken smallest first, each given at most an even share of what
    is left; what the floor division leaves goes one at a time to the lowest
    allocations, first of those still below their ask, then of all below
    their cap (``caps``: each name's ``max_rdy_count``). Deterministic: ties
    go by name. O(n log n) for n names: the leftover is poured as a
    level (:func:`_raise_lowest`), not one unit a step.
    """
    alloc, remaining = smallest_first(asks, budget)
    names = sorted(asks)
    remaining = _raise_lowest(alloc, {n: min(caps[n], asks[n]) for n in names}, names, remaining)
    _raise_lowest(alloc, {n: caps[n] for n in names}, names, remaining)
    return alloc


def smallest_first(asks: dict[str, int], budget: int) -> tuple[dict[str, int], int]:
    """Water filling's first step: asks smallest first, each given at most an even
    share of what is left (ties by name); the allocations, and the budget left."""
    alloc = dict.fromkeys(asks, 0)
    remaining, left = budget, len(asks)
    for name in sorted(asks, key=lambda name: (asks[name], name)):
        give = min(asks[name], remaining // left)
        alloc[name] = give
        remaining -= give
        left -= 1
    return alloc, remaining


def _raise_lowest(
    alloc: dict[str, int], limits: dict[str, int], names: list[str], remaining: int
) -> int:
    """Give ``remaining`` units to the lowest allocations below their limits; returns the rest.

    The result is that of giving one unit to each of the lowest allocations
    below their limit, in ``names`` order, again and again until
    ``remaining`` runs out or every allocation reaches its limit. Computed
    in O(n log n): the highest water level the units fill (walking the
    sorted allocations and limits, where the level's cost changes slope),
    then one unit each, in ``names`` order, to those left at that level
    while units remain.
    """
    below = [n for n in names if alloc[n] < limits[n]]
    if remaining <= 0 or not below:
        return remaining
    # Raising every allocation under ``level`` to it (within its limit) costs
    # ``used`` units; ``slope`` allocations rise with each unit of level.
    points = sorted([(alloc[n], 1) for n in below] + [(limits[n], -1) for n in below])
    level, slope, used = points[0][0], 0, 0
    for point, change in points:
        if slope and used + slope * (point - level) > remaining:
            step = (remaining - used) // slope  # the level runs out before ``point``
            level, used = level + step, used + slope * step
            break
        used += slope * (point - level)
        level = point
        slope += change
    remaining -= used
    for n in below:
        alloc[n] = max(alloc[n], min(limits[n], level))
    for n in below:
        if remaining <= 0:
            break
        if alloc[n] == level < limits[n]:
            alloc[n] += 1
            remaining -= 1
    return remaining
