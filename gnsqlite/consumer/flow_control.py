"""Flow control: the consumer's RDY counts, backoff and starvation, executed.

The decisions are the pure policies' (:class:`~gnsqlite.flow.RdyPlanner`,
:class:`~gnsqlite.flow.Backoff`); :class:`FlowControl` is their only caller,
sends the RDY commands they return on the named connections, runs the
backoff windows and the RDY redistribution on the hub's
:class:`~gnsqlite.timers.TimerWheel`, and is the only writer of the
``starved`` Event. It also holds the consumer's ``closing`` flag and the
``drained`` Event (set when nothing is in flight while closing).

In-flight counts per connection are the sizes of the links' ``unanswered``
sets, handed to the planner in :meth:`FlowControl.add` and read through
:attr:`ConnFlow.in_flight <gnsqlite.flow.ConnFlow.in_flight>`: nothing here
counts them. Nothing here blocks.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence, Sized
from typing import Protocol

import gevent.event

from ..config import ConsumerConfig
from ..flow import Backoff, BackoffStrategy, ConnFlow, Pause, Probe, RdyPlanner, Resume
from ..timers import TimerWheel

_monotonic = time.monotonic  # bound once: read once per answer

__all__ = ["FlowControl", "RdyTarget"]

log = logging.getLogger(__name__)

Command = tuple[str, int]


class RdyTarget(Protocol):
    """Where a RDY count goes: a subscribed connection's link."""

    name: str
    #: Its record in the planner, from :meth:`FlowControl.add`; ``None`` before.
    rdy_flow: ConnFlow | None

    def ready(self, count: int) -> None:
        """Send ``RDY count``; never blocks, never raises for a lost connection."""
        ...


class FlowControl:
    """Executes the RDY and backoff policies; see the module docstring.

    ``links`` maps connection names to their :class:`RdyTarget` (the link
    set's live mapping); ``owner`` owns the timers this schedules (the
    consumer, whose close cancels them); ``on_starved()`` runs when the
    consumer becomes starved (the batcher's cue).
    """

    def __init__(
        self,
        config: ConsumerConfig,
        strategy: BackoffStrategy | None,
        rng: random.Random,
        links: Mapping[str, RdyTarget],
        owner: object,
    ) -> None:
        self.planner = RdyPlanner(
            config.max_in_flight,
            config.low_rdy_idle_timeout,
            rng,
            low_rdy_timeout=config.low_rdy_timeout,
        )
        self.backoff = (
            Backoff(strategy, config.max_backoff_duration) if strategy is not None else None
        )
        self._interval = config.rdy_redistribute_interval
        self._links = links
        self._owner = owner
        self._wheel: TimerWheel | None = None
        #: Set while :meth:`is_starved` is true: a batching handler waits on it.
        self.starved = gevent.event.Event()
        self._starved_names = self.planner.starved_names  # the planner's live set
        self._starved_flag = False  # what ``starved`` was last set to
        self.on_starved: Callable[[], None] | None = None
        #: True once the consumer began closing: no more backoff, RDY stays 0.
        self.closing = False
        #: Set while closing when no message is in flight.
        self.drained = gevent.event.Event()

    def start(self, wheel: TimerWheel) -> None:
        """Redistribute RDY every ``rdy_redistribute_interval`` on ``wheel``."""
        self._wheel = wheel
        wheel.call_every(self._interval, self.redistribute, owner=self._owner)

    # -- per message (the hot path) ------------------------------------------------

    def received(self, link: RdyTarget, now: float) -> None:
        """A message arrived on ``link`` at ``now`` (``time.monotonic()``)."""
        flow = link.rdy_flow
        commands = self.planner.message_received(flow, now) if flow is not None else ()
        if commands:
            self.send(commands, link)
        elif (not self._starved_names) is self._starved_flag:  # starved now != the flag
            self._update_starved()  # send() with no commands

    def finished(self, link: RdyTarget) -> None:
        """A message of ``link`` was finished: its in-flight slot frees; a success for backoff."""
        now = _monotonic()
        flow = link.rdy_flow
        commands = self.planner.message_done(flow, now) if flow is not None else ()
        if commands or (not self._starved_names) is self._starved_flag:
            self.send(commands, link)
        if self.closing:
            if self.in_flight() == 0:
                self.drained.set()
            return
        backoff = self.backoff
        if backoff is not None and backoff.level:  # at level 0 a success changes nothing
            action = backoff.success(now)
            if action is not None:
                self._apply(action)

    def requeued(self, link: RdyTarget) -> None:
        """A message of ``link`` was requeued: its in-flight slot frees."""
        flow = link.rdy_flow
        commands = self.planner.message_done(flow, _monotonic()) if flow is not None else ()
        if commands or (not self._starved_names) is self._starved_flag:
            self.send(commands, link)
        if self.closing and self.in_flight() == 0:
            self.drained.set()

    def failed(self) -> None:
        """A handler failed (a requeue with backoff): counts toward backoff, before the REQ."""
        if self.backoff is not None and not self.closing:
            # RDY 0 goes out before the REQ, so nsqd cannot hand the
            # failed message straight back inside the backoff window.
            self._apply(self.backoff.failure(time.monotonic()))

    # -- connections -----------------------------------------------------------------

    def add(self, name: str, max_rdy_count: int, held: Sized) -> ConnFlow:
        """``name`` subscribed; it gets its share of the budget.

        ``held`` is its link's live set of unanswered messages: the size is
        its in-flight count, changed by the link before each call here.
        Returns the planner's record of it, which the link keeps as its
        ``rdy_flow`` so that no message looks it up by name.
        """
        commands = self.planner.add(name, max_rdy_count, time.monotonic(), held)
        flow = self.planner.conns[name]
        self.send(commands)
        return flow

    def remove(self, name: str) -> None:
        """``name`` is gone; its budget goes to the others."""
        self.send(self.planner.remove(name, time.monotonic()))
        if self.in_flight() == 0:
            self.drained.set()

    def set_connecting(self, count: int, rebalance: bool) -> None:
        """``count`` connections are being made; with ``rebalance``, share the budget again."""
        if rebalance:
            self.send(self.planner.set_connecting(count, time.monotonic()))
        else:
            self.planner.set_connecting(count)

    # -- the budget -------------------------------------------------------------------

    def set_max_in_flight(self, max_in_flight: int) -> None:
        """Change the RDY budget; in backoff it applies when the flow resumes."""
        self.send(self.planner.set_max_in_flight(max_in_flight, time.monotonic()))

    def pause(self) -> None:
        """RDY 0 everywhere, through the planner, so nothing tops it up again."""
        self.send(self.planner.pause())

    def redistribute(self) -> None:
        """Share the budget out again (by demand or in turn)."""
        self.send(self.planner.redistribute(time.monotonic()))

    def in_flight(self) -> int:
        """Messages received and not yet answered, over all connections."""
        return sum(f.in_flight for f in self.planner.conns.values())

    def is_starved(self) -> bool:
        """True when a connection's in-flight count reached 85% of its last RDY."""
        return self.planner.is_starved()

    def stop(self) -> None:
        """The consumer closed: ``starved`` is cleared for good."""
        self.starved.clear()
        self._starved_flag = False

    # -- executing -------------------------------------------------------------------

    def send(self, commands: Sequence[Command], origin: RdyTarget | None = None) -> None:
        """Send the planner's RDY commands, then bring ``starved`` up to date.

        The planner names connections; a command for ``origin`` (the link
        whose message caused it) goes straight to it, others are looked up.
        Every change of the planner goes through here (RDY counts and in-flight
        counts alike), so this is the one place the Event follows them.
        """
        links = self._links
        for name, count in commands:
            link = origin if origin is not None and name == origin.name else links.get(name)
            if link is not None:
                link.ready(count)
        self._update_starved()  # a new last RDY can start or end starvation

    def _update_starved(self) -> None:
        starved = self._starved_flag = bool(self._starved_names)
        if starved:
            if not self.starved.is_set():
                self.starved.set()
                if self.on_starved is not None:
                    self.on_starved()
        elif self.starved.is_set():
            self.starved.clear()

    def _apply(self, action: Pause | Probe | Resume | None) -> None:
        if action is None or self.closing:
            return
        if isinstance(action, Pause):
            log.info("%s: backing off for %.3f s", self._owner, action.duration)
            self.pause()
            if self._wheel is not None:
                self._wheel.call_later(action.duration, self._window_ended, owner=self._owner)
        elif isinstance(action, Probe):
            self.send(self.planner.probe())
        else:
            log.info("%s: backoff over, resuming the full flow", self._owner)
            self.send(self.planner.resume(time.monotonic()))

    def _window_ended(self) -> None:
        if self.backoff is not None:
            self._apply(self.backoff.window_ended(time.monotonic()))
