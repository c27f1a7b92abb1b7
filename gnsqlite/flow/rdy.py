"""RDY distribution: how a consumer spreads ``max_in_flight`` over its connections.

The consumer calls :meth:`RdyPlanner.redistribute` every
``rdy_redistribute_interval`` seconds (an *evaluation*) and tells the planner
about connections, messages and answers in between. The rules:

* **Budget.** The sum of the RDY counts last sent never exceeds
  ``max_in_flight`` (decreases are emitted before increases). In full flow the
  planner also counts what nsqd may hold for a connection
  (:attr:`LinkPlan.committed`): its in-flight count when above its RDY, and,
  after its RDY was lowered, the old count less the answers sent since (nsqd
  may have sent messages that are still on the wire) until the next
  evaluation. Budget taken from one connection reaches another only as that
  is answered, so nsqd holds at most ``max_in_flight`` for the consumer in all.
  The one exception: a connection holding no RDY gets its ``RDY 1`` at once
  (:attr:`RdyPlanner.overdraft` counts those, at most one per connection, until
  the next evaluation). No connection exceeds its ``max_rdy_count``.
* **Start.** A new connection starts at ``RDY 1``; until it receives a message
  it holds its even share in reserve (``"new"``) until the first evaluation,
  so the first connections to receive are not favoured; connections still
  being set up (:meth:`RdyPlanner.set_connecting`) hold theirs back too. Its
  first message opens its share at once (and starts its demand window: the
  one message on its first ``RDY 1`` does not make it hungry).
* **Shares by demand** (``max_in_flight`` >= connections). Every connection
  keeps at least ``RDY 1``. At each evaluation a connection that used its RDY
  fully in the last window (its in-flight count reached 85% of its RDY: the
  guide's *starved*) asks for as much as it may get; one that did not asks
  for its peak in-flight count plus a quarter, plus one; one that has dried
  up (nothing in flight and no message for the last half interval) asks for
  1, whatever its peak. The budget is shared
  by water-filling: small asks are met in full, the rest is split evenly over
  the hungry connections, and what nobody asked for is spread evenly. So an
  nsqd with messages gets the budget idle ones leave (``"demand"``), idle ones
  keep their minimum (``"idle"``), equal demand gives equal shares
  (``"even"``). A connection that wakes up (a message on its ``RDY 1``) gets
  its share back at the next evaluation, as the others answer what they hold.
  So demand moves at the pace of evaluations, from the start too: one busy
  nsqd of three gets the larger share at the first evaluation, and the budget
  taken from the others (what nsqd might still send them) reaches it by the
  next; when traffic moves to another nsqd, the budget follows within two or
  three evaluations (the first at which the old one has dried up, and the
  next, which frees what it might still have on the wire).
* **Rotation** (``max_in_flight`` < connections). Each connection holds 0 or 1.
  A waiting connection is *known to have messages* (:attr:`LinkPlan.eager`)
  when it received during its last turn and was not idle when it ended, or
  never had one. At an evaluation
  a holder gives its 1 up when a connection known to have messages waits and
  the holder has had its turn for one evaluation (the short turn), when it
  received nothing for ``low_rdy_idle_timeout``, or when it has held it for
  ``low_rdy_timeout`` (busy or not); freed RDY goes to the connections that
  have waited longest (first come, first served; one that just gave up goes
  last). Hence, with ``n`` connections, ``m = max_in_flight``, evaluation
  interval ``I`` and busy timeout ``T``, a turn ends at the evaluation nearest
  to its length after it began (it lasts that, give or take ``I / 2``): ``I``
  while one known to have messages waits, else ``T``. A waiting connection
  gets RDY within ``ceil((n - m) / m)`` turns: within
  ``ceil((n - m) / m) * (min(I, T) + I / 2)`` seconds when it is known to have
  messages (3 s with the defaults, three connections and ``max_in_flight=1``),
  and ``ceil((n - m) / m) * (T + I / 2)`` when it found none in its last turn
  and has some since, plus the time to answer the message the giver still
  holds (:func:`rotation_bound`). Every nsqd with steady traffic is therefore
  served every few seconds, and busy nsqd share the turns evenly.
* **Backoff.** The planner is *paused* (``RDY 0`` everywhere) or *probing*
  (``RDY 1`` on one connection); ``resume`` brings the rules above back.
* **Changes only.** nsqd's RDY is a window, not a counter: it sends a
  message while the connection's in-flight count is below its RDY, and every
  FIN, REQ or message timeout reopens the window. So a count is sent only
  when it changes; an answer sends RDY only to hand freed budget to a
  connection below its target (in full flow), never the same count again.

Each connection's :attr:`LinkPlan.reason` says why it holds its count (see
:data:`REASONS`). Its in-flight count is the size of a collection the caller
owns and passes to :meth:`RdyPlanner.add` (the consumer's link's unanswered
messages): the planner reads it and never counts, so the count is kept once;
``message_received`` and ``message_done`` are called after the caller added
the message to it or took it out. Every method returns the RDY commands to send as
``(connection name, count)`` pairs, in order. Nothing here does I/O or reads a
clock: times are float seconds passed in as ``now``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence, Sized
from typing import Final

from .._mypyc import mypyc_attr
from ..protocol import defaults
from .link_plan import (
    DEMAND_HEADROOM,
    GRANT_STEP_RATIO,
    NEW_EVALUATIONS,
    REASONS,
    STARVATION_RATIO,
    Command,
    LinkPlan,
    may_hold,
    rotation_bound,
    turn_length,
    water_fill,
)

__all__ = [
    "LinkPlan",
    "RdyPlanner",
    "REASONS",
    "GRANT_STEP_RATIO",
    "STARVATION_RATIO",
    "rotation_bound",
    "turn_length",
]

#: What the per-message calls return when there is nothing to send (no list per message).
_NO_COMMANDS: Final[tuple[Command, ...]] = ()


@mypyc_attr(allow_interpreted_subclasses=True)  # the compiled build: tests subclass it
class RdyPlanner:
    """Decides every RDY count of a consumer; see the module docstring.

    ``low_rdy_idle_timeout`` and ``low_rdy_timeout`` are seconds; ``rng``
    chooses the connection that probes after a backoff window.
    """

    FULL = "full"
    PAUSED = "paused"
    PROBING = "probing"

    def __init__(
        self,
        max_in_flight: int,
        low_rdy_idle_timeout: float = 10.0,
        rng: random.Random | None = None,
        low_rdy_timeout: float = defaults.LOW_RDY_TIMEOUT,
    ) -> None:
        self.max_in_flight = max_in_flight
        self.low_rdy_idle_timeout = low_rdy_idle_timeout
        self.low_rdy_timeout = low_rdy_timeout
        self.rng = rng if rng is not None else random.Random()
        self.conns: dict[str, LinkPlan] = {}
        self.mode = self.FULL
        #: The starved connections' names, kept up to date so :meth:`is_starved`
        #: is O(1); the same set object for the planner's life (read it, never change it).
        self.starved_names: set[str] = set()
        self._starved = self.starved_names
        self._short: set[str] = set()  # connections below their target
        self._last_evaluation: float | None = None
        #: Floor grants (RDY 1 to a connection holding none) made since the last
        #: evaluation while messages might still be on the wire to others: by
        #: this many at most, nsqd may hold more than ``max_in_flight`` until then.
        self.overdraft = 0
        #: Connections being set up (set_connecting): their even shares are held back.
        self.connecting = 0
        #: Budget answers freed since the last :meth:`_fill`, and the least that
        #: any connection it left short waits for: an answer calls ``_fill`` (an
        #: O(n) pass) only once that much was freed, not once per answer.
        self._freed = 0
        self._fill_after = 1

    # -- queries -----------------------------------------------------------

    @property
    def total_rdy(self) -> int:
        """The sum of the RDY counts last sent: never above ``max_in_flight``."""
        return sum(c.last_rdy for c in self.conns.values())

    def is_starved(self) -> bool:
        """True when any connection is starved (the guide's definition)."""
        return bool(self._starved)

    def _check(self, flow: LinkPlan) -> None:
        """Keep the starved and short sets up to date for ``flow``."""
        starved = flow.starved
        if starved is not flow.listed_starved:
            self._list_starved(flow, starved)
        if flow.last_rdy < flow.target:
            self._short.add(flow.name)
        else:
            self._short.discard(flow.name)

    def _list_starved(self, flow: LinkPlan, starved: bool) -> None:
        """Put ``flow`` in the set of starved connections, or take it out.

        The per-message paths write it out (no call per message), and only on
        a change: they test ``flow.listed_starved`` first, an attribute where
        the set's test would be a lookup.
        """
        flow.listed_starved = starved
        if starved:
            self._starved.add(flow.name)
        else:
            self._starved.discard(flow.name)

    def share(self, flow: LinkPlan) -> int:
        """The even RDY count ``flow`` would get (0 or 1 when connections outnumber
        ``max_in_flight``)."""
        n = len(self.conns)
        if n == 0 or self.max_in_flight <= 0:
            return 0
        if self.max_in_flight < n:
            return 1
        return max(1, min(self.max_in_flight // n, flow.max_rdy_count))

    @property
    def scarce(self) -> bool:
        """True when connections outnumber ``max_in_flight``: RDY must rotate."""
        return 0 < self.max_in_flight < len(self.conns)

    # -- the one place RDY changes -----------------------------------------

    def _send(self, flow: LinkPlan, count: int, now: float | None, out: list[Command]) -> None:
        if count > 0 and flow.last_rdy == 0 and now is not None:
            # A hand-over starts a fresh idle clock (and a scarce RDY turn).
            flow.rdy_handed_at = now
        if count == 0 and flow.last_rdy > 0 and self.mode == self.FULL and now is not None:
            flow.waiting_since = now
        if count < flow.last_rdy and self.mode == self.FULL and not self.scarce:
            flow.reserve = flow.committed
        flow.last_rdy = count
        self._check(flow)
        out.append((flow.name, count))

    def _free(self) -> tuple[int, int]:
        """The budget left: counting reserves (for shares), and not (for the floor RDY 1)."""
        if self.mode != self.FULL:
            free = self.max_in_flight - self.total_rdy
            return free, free
        committed = held = 0
        for f in self.conns.values():  # one pass: an answer may call this with many links
            in_flight = len(f.held)
            committed += may_hold(f.last_rdy, in_flight, f.reserve)
            held += may_hold(f.last_rdy, in_flight)  # reserves left out
        return self.max_in_flight - committed, self.max_in_flight - held

    def _fill(self, now: float | None, out: list[Command], eager: bool = True) -> None:
        """Hand free budget to the connections below their target, longest waiting first.

        A connection's first RDY (1) is never withheld for messages that may
        still be on the wire to another: only its share above 1 waits for them.
        Unless ``eager``, a grant waits until it can add a quarter of the
        target at least (or meet it), so answers do not trickle RDY one by one.
        Notes the least budget a connection left short waits for
        (``_fill_after``), so that answers call this again only when it may grant.
        """
        self._freed = 0
        self._fill_after = 1
        if not self._short:
            return
        free, loose = self._free()
        short = sorted(
            (self.conns[n] for n in self._short), key=lambda f: (f.waiting_since, f.name)
        )
        full = self.mode == self.FULL
        waits: int | None = None  # the least more budget a connection left short needs
        for f in short:
            if loose <= 0:
                return
            held = f.committed if full else f.last_rdy  # its own reserve is its to use
            grant = min(f.target, held + max(0, free))
            if grant <= f.last_rdy == 0 and f.in_flight == 0:
                grant = 1  # the floor
                if free <= 0:
                    self.overdraft += 1
            step = max(1, math.ceil(f.target * GRANT_STEP_RATIO))
            if grant > f.last_rdy and (eager or grant == f.target or grant - f.last_rdy >= step):
                free -= max(0, grant - held)
                loose -= max(0, grant - may_hold(f.last_rdy, f.in_flight))
                self._send(f, grant, now, out)
                if f.last_rdy >= f.target:
                    continue
                held = f.committed if full else f.last_rdy
                grant = min(f.target, held + max(0, free))
            # Still short: its grant grows with the budget answers free, one for
            # one at most; it needs this much more to reach its step (or target).
            needs = f.last_rdy + min(step, f.target - f.last_rdy) - grant
            waits = needs if waits is None else min(waits, needs)
        self._fill_after = max(1, waits or 1)

    def _apply(self, targets: dict[str, tuple[int, str]], now: float | None) -> list[Command]:
        """Set every target and reason; send decreases first, then grant what the budget allows."""
        out: list[Command] = []
        flows = list(self.conns.values())
        for f in flows:
            f.target, f.reason = targets[f.name]
            self._check(f)
        for f in flows:
            if f.target < f.last_rdy:
                self._send(f, f.target, now, out)
        self._fill(now, out)
        return out

    # -- the policies ----------------------------------------------------------

    def _targets(self, now: float | None, half: float = -1.0) -> dict[str, tuple[int, str]]:
        """Every connection's (target, reason); ``half`` >= 0 (half the time since the
        last evaluation) only at an evaluation."""
        flows = list(self.conns.values())
        if self.mode == self.PAUSED:
            return {f.name: (0, "backoff") for f in flows}
        if self.max_in_flight <= 0:
            return {f.name: (0, "paused") for f in flows}
        if self.mode == self.PROBING:
            holders = [f for f in flows if f.last_rdy > 0]
            keep = holders[0] if holders else (self.rng.choice(flows) if flows else None)
            return {f.name: (1, "probe") if f is keep else (0, "backoff") for f in flows}
        if self.scarce:
            return self._rotation_targets(now, half)
        return self._demand_targets()

    def _rotation_targets(self, now: float | None, half: float) -> dict[str, tuple[int, str]]:
        """0 or 1 each: holders keep theirs for their turn, the longest waiting get the rest."""
        flows = list(self.conns.values())
        holders = [f for f in flows if f.last_rdy > 0 or f.target > 0]
        released: list[LinkPlan] = []
        if half >= 0 and now is not None:  # an evaluation: turns may end
            # Someone waits with messages (or was never tried): turns are short.
            eager = any(f.eager for f in flows if f.last_rdy == 0 and f.target == 0)
            for f in holders:
                if f.last_rdy == 0:
                    continue  # chosen, its RDY waits for the giver's answer: no turn yet
                turn = f.turn_start
                idle = now - f.idle_since() >= self.low_rdy_idle_timeout
                held = now - turn
                if idle or held >= self.low_rdy_timeout - half or (eager and held >= half):
                    released.append(f)
                    # Messages in this turn, and not idle since: it is known to have some.
                    received = f.last_message_at is not None and f.last_message_at >= turn
                    f.eager = received and not idle
        # Membership by identity, in sets: O(n) a pass (a list's ``in`` compares
        # the records field by field, O(n * max_in_flight)).
        gone = set(map(id, released))
        keep = [f for f in holders if id(f) not in gone]
        # Fewer slots than holders (max_in_flight lowered): the latest hand-overs keep theirs.
        keep.sort(key=lambda f: (-f.turn_start, f.name))
        keep = keep[: self.max_in_flight]
        kept = set(map(id, keep))
        waiting = [f for f in flows if id(f) not in kept and id(f) not in gone]
        waiting.sort(key=lambda f: (f.waiting_since, f.name))
        released.sort(key=lambda f: (f.turn_start, f.name))
        handed = (waiting + released)[: self.max_in_flight - len(keep)]
        chosen = set(map(id, keep + handed))
        if now is not None:
            for f in released:
                if id(f) not in chosen:
                    f.waiting_since = now  # to the back of the line
            for f in handed:
                if f.target == 0 or id(f) in gone:
                    f.rdy_handed_at = now  # its turn starts now (again, if no one else waits)
        return {f.name: (1, "rotation") if id(f) in chosen else (0, "waiting") for f in flows}

    def _demand_targets(self) -> dict[str, tuple[int, str]]:
        """Water-filling: small asks met in full, the rest even over the hungry, spare spread."""
        flows = sorted(self.conns.values(), key=lambda f: f.name)
        n = len(flows)
        if n == 0:
            return {}
        # Connections on their way keep their even shares free, so the first
        # to subscribe does not take the budget only to give it back.
        slots = n + self.connecting
        budget = self.max_in_flight - min(
            self.connecting * (self.max_in_flight // slots), self.max_in_flight - n
        )
        even = self.max_in_flight // slots
        asks: dict[str, int] = {}
        for f in flows:
            reserved = not f.warmed and f.evaluations < NEW_EVALUATIONS
            ask = f.max_rdy_count if (f.hungry or reserved) else f.ask
            asks[f.name] = max(1, min(ask, f.max_rdy_count))
        alloc = water_fill(asks, {f.name: f.max_rdy_count for f in flows}, budget)
        targets: dict[str, tuple[int, str]] = {}
        for f in flows:
            count = alloc[f.name]
            if not f.warmed and f.evaluations < NEW_EVALUATIONS:
                targets[f.name] = (min(1, count), "new")  # its share stays in reserve
            elif count >= f.max_rdy_count and f.max_rdy_count < even:
                targets[f.name] = (count, "max_rdy_count")
            elif count > even + 1:
                targets[f.name] = (count, "demand")
            elif count < even:
                targets[f.name] = (count, "idle")
            else:
                targets[f.name] = (count, "even")
        return targets

    def _rebalance(self, now: float | None = None) -> list[Command]:
        # half given: mypyc's glue for an interpreted subclass (the compiled build)
        # passes 0.0 for an omitted float argument, not its default
        return self._apply(self._targets(now, -1.0), now)

    # -- events ------------------------------------------------------------

    def add(self, name: str, max_rdy_count: int, now: float, held: Sized) -> list[Command]:
        """A connection subscribed: it starts at RDY 1 (when the budget allows).

        ``held`` is the caller's live collection of the connection's messages
        received and not yet answered: its size is the in-flight count
        (:attr:`LinkPlan.in_flight`); the planner only reads it.
        """
        if self._last_evaluation is None:
            self._last_evaluation = now  # the first window starts with the first connection
        self.conns[name] = LinkPlan(
            name, max(1, max_rdy_count), connected_at=now, held=held, waiting_since=now
        )
        return self._rebalance(now)

    def set_connecting(self, count: int, now: float | None = None) -> list[Command]:
        """``count`` connections are being set up: hold their even shares back.

        Takes effect at the next change; when fewer are on their way than
        before (one failed), what was held back is shared out at once.
        """
        fewer = count < self.connecting
        self.connecting = count
        return self._rebalance(now) if fewer else []

    def remove(self, name: str, now: float | None = None) -> list[Command]:
        """A connection ended: its RDY (and what it held) is free for the others."""
        self._starved.discard(name)
        self._short.discard(name)
        flow = self.conns.pop(name, None)
        if flow is None:
            return []
        flow.active = False
        flow.listed_starved = False
        return self._rebalance(now)

    def message_received(self, flow: LinkPlan, now: float) -> tuple[Command, ...]:
        """A message arrived on ``flow``'s connection (already in its ``held``).

        ``flow`` is the record :meth:`add` made (the caller keeps it: no
        lookup by name). The first message opens the connection's share.
        The per-message path: O(1), and it returns commands only for a
        connection's first message (in full flow); none as a shared empty tuple.
        """
        if not flow.active:
            return _NO_COMMANDS
        in_flight = len(flow.held)
        flow.last_message_at = now
        # In-flight only grew (to 1 at least): a starved connection stays
        # starved, so only the other way needs a check. A copy of
        # link_plan.starved for the per-message path (in_flight > 0 holds
        # here); tests/unit/test_flow_rules.py checks the two agree.
        if in_flight >= flow.last_rdy * STARVATION_RATIO:
            if not flow.listed_starved:  # _list_starved, written out (no call per message)
                flow.listed_starved = True
                self._starved.add(flow.name)
            flow.window_saturated = True
        if in_flight > flow.window_peak:
            flow.window_peak = in_flight
        if not flow.warmed:
            flow.warmed = True
            flow.hungry = True
            # The window is judged by what it does with the share this opens,
            # not by the one message on its first RDY 1.
            flow.window_saturated = False
            flow.window_peak = 0
            if self.mode == self.FULL and not self.scarce:
                return tuple(self._rebalance(now))  # a tuple: its truth is a size test, compiled
        return _NO_COMMANDS

    def message_done(self, flow: LinkPlan, now: float | None = None) -> Sequence[Command]:
        """A message of ``flow``'s connection was answered (FIN or REQ) and left its ``held``.

        nsqd's window reopens by itself, so the count is not sent again. In
        full flow the answer may free budget a connection below its target
        waits for: that grant is returned, to travel in the same write as the
        answer. The per-message path: O(1) unless the answer frees such budget;
        no commands come as a shared empty tuple (no list per answer).
        :meth:`answered` then :meth:`grant_freed`, for a caller that reads the
        clock only when a grant is due.
        """
        if self.answered(flow):
            return self.grant_freed(now)
        return _NO_COMMANDS

    def answered(self, flow: LinkPlan) -> bool:
        """:meth:`message_done`'s counting, O(1): whether a grant pass is now due.

        When it returns ``True`` the caller must call :meth:`grant_freed` (with
        the clock) and send what it returns.
        """
        if not flow.active:
            return False
        in_flight = len(flow.held)  # after the answer; one more before it
        last_rdy = flow.last_rdy
        reserve = flow.reserve
        # Only a connection holding more than its RDY frees budget by answering.
        holding_more = reserve > 0 or in_flight >= last_rdy
        before = may_hold(last_rdy, in_flight + 1, reserve) if holding_more else 0
        if reserve > 0:
            flow.reserve = reserve - 1  # the RDY went out before this answer: nsqd sends no more
        # In-flight only shrank: a connection not starved stays so. A copy of
        # link_plan.starved for the per-answer path; tests/unit/test_flow_rules.py
        # checks the two agree.
        if flow.listed_starved and not (in_flight > 0 and in_flight >= last_rdy * STARVATION_RATIO):
            flow.listed_starved = False  # _list_starved, written out
            self._starved.discard(flow.name)
        if not holding_more or self.mode != self.FULL:
            return False
        if not self._short:
            return False
        freed = before - flow.committed
        if freed <= 0:
            return False
        # Budget reaches a short connection only through answers like this one
        # (everything else that changes it fills at once): until the answers
        # since the last fill freed what it waits for, no pass can grant it.
        self._freed += freed
        return self._freed >= self._fill_after

    def grant_freed(self, now: float | None = None) -> list[Command]:
        """The grant pass :meth:`answered` found due: the RDY commands to send."""
        out: list[Command] = []
        self._fill(now, out, eager=False)
        return out

    def set_max_in_flight(self, max_in_flight: int, now: float | None = None) -> list[Command]:
        """Change ``max_in_flight`` at run time; 0 pauses the flow."""
        self.max_in_flight = max_in_flight
        return self._rebalance(now)

    def pause(self) -> list[Command]:
        """Backoff: ``RDY 0`` everywhere."""
        self.mode = self.PAUSED
        return self._rebalance()

    def probe(self) -> list[Command]:
        """End of a backoff window: ``RDY 1`` to one connection chosen at random."""
        self.mode = self.PROBING
        return self._rebalance()

    def resume(self, now: float | None = None) -> list[Command]:
        """Backoff is over: every connection gets its share again."""
        self.mode = self.FULL
        return self._rebalance(now)

    def redistribute(self, now: float) -> list[Command]:
        """An evaluation (call it every ``rdy_redistribute_interval`` seconds).

        Closes the demand window of every connection, then, in full flow,
        shares the budget by demand or rotates scarce RDY (see the module
        docstring). Does nothing in backoff but close the windows.
        """
        half = (now - self._last_evaluation) / 2 if self._last_evaluation is not None else 0.0
        half = max(0.0, half)
        for f in self.conns.values():
            f.reserve = 0  # what was on the wire when its RDY was lowered has arrived
            f.evaluations += 1
            if (
                half > 0
                and f.in_flight == 0
                and not (f.last_message_at is not None and now - f.last_message_at < half)
            ):
                # Dried up: nothing in hand and nothing for the last half window,
                # whatever its peak was; its budget goes where the messages are now.
                f.hungry = False
                f.ask = 1
            else:
                f.hungry = f.window_saturated
                f.ask = max(1, math.ceil(f.window_peak * DEMAND_HEADROOM) + 1)
            f.window_peak = f.in_flight
            f.window_saturated = f.listed_starved
        self._last_evaluation = now
        self.overdraft = 0
        #: Connections being set up (set_connecting): their even shares are held back.
        self.connecting = 0
        if self.mode != self.FULL:
            return []
        return self._apply(self._targets(now, half), now)
