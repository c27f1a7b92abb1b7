"""RDY distribution: how a consumer spreads ``max_in_flight`` over its connections.

The rules, from the client-library guide:

* a new connection starts at ``RDY 1`` so the first connections are not
  favoured; once it has received a message it gets its fair share,
  ``max_in_flight // connections`` (never above its ``max_rdy_count``);
* the sum of the RDY counts last sent never exceeds ``max_in_flight``
  (decreases are always emitted before increases);
* the RDY count is sent again when what remains of it drops to 0 or below
  25% of the value last sent (checked as messages are answered, in full
  flow; not while probing in backoff);
* when ``max_in_flight`` is smaller than the number of connections, each
  connection holds 0 or 1, and :meth:`RdyPlanner.redistribute` periodically
  takes the 1 from connections idle longer than ``low_rdy_idle_timeout`` and
  gives it to others at random, so every nsqd is eventually drained;
* in backoff the planner is *paused* (``RDY 0`` everywhere) or *probing*
  (``RDY 1`` on one connection).

Every method returns the RDY commands to send as ``(connection name,
count)`` pairs, in order. Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["ConnFlow", "RdyPlanner", "STARVATION_RATIO", "RESEND_RATIO"]

#: The guide's constant: a connection is starved when its in-flight count
#: reaches 85% of its last RDY, anticipating starvation rather than waiting.
STARVATION_RATIO = 0.85
#: RDY is sent again when what remains of it falls below this share.
RESEND_RATIO = 0.25

Command = tuple[str, int]


@dataclass
class ConnFlow:
    """The flow state of one connection, as the consumer tracks it."""

    name: str
    max_rdy_count: int
    connected_at: float
    rdy: int = 0  # what remains of the last RDY (decremented per message)
    last_rdy: int = 0  # the RDY count last sent
    in_flight: int = 0
    warmed: bool = False  # received a message since it connected
    last_message_at: float | None = None  # when the last message arrived
    rdy_handed_at: float | None = None  # when redistribute() last gave it the scarce RDY

    @property
    def starved(self) -> bool:
        """The guide's ``is_starved`` test for this connection."""
        return self.in_flight > 0 and self.in_flight >= self.last_rdy * STARVATION_RATIO

    def idle_since(self) -> float:
        """The start of its idle clock: its last message, connection or RDY hand-over."""
        return max(
            t
            for t in (self.connected_at, self.last_message_at, self.rdy_handed_at)
            if t is not None
        )


class RdyPlanner:
    """Decides every RDY count of a consumer; see the module docstring."""

    FULL = "full"
    PAUSED = "paused"
    PROBING = "probing"

    def __init__(
        self,
        max_in_flight: int,
        low_rdy_idle_timeout: float = 10.0,
        rng: random.Random | None = None,
    ) -> None:
        self.max_in_flight = max_in_flight
        self.low_rdy_idle_timeout = low_rdy_idle_timeout
        self.rng = rng if rng is not None else random.Random()
        self.conns: dict[str, ConnFlow] = {}
        self.mode = self.FULL
        self._starved: set[str] = set()  # kept up to date so is_starved() is O(1)

    # -- queries -----------------------------------------------------------

    @property
    def total_rdy(self) -> int:
        """The sum of the RDY counts last sent: never above ``max_in_flight``."""
        return sum(c.last_rdy for c in self.conns.values())

    def is_starved(self) -> bool:
        """True when any connection is starved (the guide's definition)."""
        return bool(self._starved)

    def _check_starved(self, flow: ConnFlow) -> None:
        if flow.starved:
            self._starved.add(flow.name)
        else:
            self._starved.discard(flow.name)

    def share(self, flow: ConnFlow) -> int:
        """The full-flow RDY count ``flow`` deserves (0 or 1 when connections outnumber
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

    def _send(self, flow: ConnFlow, count: int, out: list[Command]) -> None:
        flow.last_rdy = count
        flow.rdy = count
        self._check_starved(flow)
        out.append((flow.name, count))

    def _budget(self) -> int:
        return self.max_in_flight - self.total_rdy

    def _rebalance(self) -> list[Command]:
        """Bring every connection to what the mode allows: decreases first."""
        out: list[Command] = []
        flows = list(self.conns.values())
        if self.mode == self.PAUSED:
            targets = {f.name: 0 for f in flows}
        elif self.mode == self.PROBING:
            holders = [f for f in flows if f.last_rdy > 0]
            keep = holders[0] if holders else (self.rng.choice(flows) if flows else None)
            targets = {f.name: 1 if f is keep and self.max_in_flight > 0 else 0 for f in flows}
        elif self.scarce:
            # Keep the 1s where they are (redistribute moves them), but never
            # more of them than max_in_flight; hand out the rest at random.
            targets = {f.name: min(f.last_rdy, 1) for f in flows}
            holders = [f for f in flows if targets[f.name] > 0]
            for f in holders[self.max_in_flight :]:
                targets[f.name] = 0
            free = self.max_in_flight - sum(targets.values())
            empty = [f for f in flows if targets[f.name] == 0]
            for f in self.rng.sample(empty, min(free, len(empty))):
                targets[f.name] = 1
        else:
            targets = {f.name: self.share(f) if f.warmed else min(1, self.share(f)) for f in flows}
        for f in flows:
            if targets[f.name] < f.last_rdy:
                self._send(f, targets[f.name], out)
        for f in flows:
            want = targets[f.name]
            if want > f.last_rdy:
                grant = min(want, f.last_rdy + self._budget())
                if grant > f.last_rdy:
                    self._send(f, grant, out)
        return out

    # -- events ------------------------------------------------------------

    def add(self, name: str, max_rdy_count: int, now: float) -> list[Command]:
        """A connection subscribed: it starts at RDY 1 (when the budget allows)."""
        self.conns[name] = ConnFlow(name, max(1, max_rdy_count), connected_at=now)
        return self._rebalance()

    def remove(self, name: str) -> list[Command]:
        """A connection ended: its RDY is free for the others."""
        self._starved.discard(name)
        if self.conns.pop(name, None) is None:
            return []
        return self._rebalance()

    def message_received(self, name: str, now: float) -> list[Command]:
        """A message arrived on ``name``: count it; its first message opens its share."""
        flow = self.conns.get(name)
        if flow is None:
            return []
        flow.in_flight += 1
        flow.rdy -= 1
        flow.last_message_at = now
        self._check_starved(flow)
        if not flow.warmed:
            flow.warmed = True
            if self.mode == self.FULL and not self.scarce:
                return self._rebalance()
        return []

    def message_done(self, name: str) -> list[Command]:
        """A message from ``name`` was answered (FIN or REQ): top its RDY up when low.

        The top-up is decided here rather than on arrival so that it travels
        in the same write as the FIN. While probing, the one message is the
        test and its result decides what comes next, so nothing is topped up.
        """
        flow = self.conns.get(name)
        if flow is None:
            return []
        if flow.in_flight > 0:
            flow.in_flight -= 1
            self._check_starved(flow)
        low = flow.rdy <= 0 or flow.rdy < flow.last_rdy * RESEND_RATIO
        if self.mode == self.FULL and flow.last_rdy > 0 and low:
            out: list[Command] = []
            self._send(flow, flow.last_rdy, out)
            return out
        return []

    def set_max_in_flight(self, max_in_flight: int) -> list[Command]:
        """Change ``max_in_flight`` at run time; 0 pauses the flow."""
        self.max_in_flight = max_in_flight
        return self._rebalance()

    def pause(self) -> list[Command]:
        """Backoff: ``RDY 0`` everywhere."""
        self.mode = self.PAUSED
        return self._rebalance()

    def probe(self) -> list[Command]:
        """End of a backoff window: ``RDY 1`` to one connection chosen at random."""
        self.mode = self.PROBING
        return self._rebalance()

    def resume(self) -> list[Command]:
        """Backoff is over: every connection gets its share again."""
        self.mode = self.FULL
        return self._rebalance()

    def redistribute(self, now: float) -> list[Command]:
        """Rotate scarce RDY away from idle connections (call it periodically).

        Only acts in full flow with more connections than ``max_in_flight``:
        a connection holding RDY that received nothing for
        ``low_rdy_idle_timeout`` seconds gives it up, and the freed RDY goes
        to connections holding none, chosen at random (others first).
        """
        if self.mode != self.FULL or not self.scarce:
            return self._rebalance() if self.mode == self.FULL else []
        out: list[Command] = []
        freed: list[ConnFlow] = []
        for f in self.conns.values():
            if f.last_rdy > 0 and now - f.idle_since() > self.low_rdy_idle_timeout:
                self._send(f, 0, out)
                freed.append(f)
        others = [f for f in self.conns.values() if f.last_rdy == 0 and f not in freed]
        budget = self._budget()
        # The ones just idled get it back only if no one else can take it.
        pool = others if len(others) >= budget else others + freed
        for f in self.rng.sample(pool, min(budget, len(pool))):
            # A connection handed the RDY starts a fresh idle clock.
            f.rdy_handed_at = now
            self._send(f, 1, out)
        return out
