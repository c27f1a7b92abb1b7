"""Flow control: the consumer's RDY counts, backoff and starvation, executed.

The decisions are the pure policies' (:class:`~gnsqlite.flow.RdyPlanner`,
:class:`~gnsqlite.flow.Backoff`); :class:`FlowControl` is their only caller,
sends the RDY commands they return on the named connections, runs the
backoff windows and the RDY redistribution on the hub's
:class:`~gnsqlite.timers.TimerWheel`, and is the only writer of the
``starved`` Event. It sets the consumer's
:attr:`Lifecycle.drained <gnsqlite.consumer.lifecycle.Lifecycle.drained>`
when nothing is in flight, and stops backing off once it is closing.

In-flight counts per connection are the sizes of the links' ``unanswered``
sets, handed to the planner in :meth:`FlowControl.add` and read through
:attr:`LinkPlan.in_flight <gnsqlite.flow.LinkPlan.in_flight>`: nothing here
counts them. Nothing here blocks but :meth:`FlowControl.wait_drained`.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import Final

import gevent.event

from ..config import ConsumerConfig
from ..flow import Backoff, BackoffStrategy, Pause, Probe, RdyPlanner, Resume
from ..timers import TimerWheel
from .lifecycle import Lifecycle
from .link import FlowEvents, Link

_monotonic: Final = time.monotonic  # bound once: read once per answer

__all__ = ["FlowControl"]

log = logging.getLogger(__name__)

Command = tuple[str, int]


class FlowControl(FlowEvents):
    """Executes the RDY and backoff policies; see the module docstring.

    The links it counts are those :meth:`add` was given (by name, until
    :meth:`remove`); the ``lifecycle``'s owner owns the timers this
    schedules (the consumer, whose close cancels them); ``on_starved()``
    runs when the consumer becomes starved (the batcher's cue).
    """

    def __init__(
        self,
        config: ConsumerConfig,
        strategy: BackoffStrategy | None,
        rng: random.Random,
        lifecycle: Lifecycle,
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
        # The backoff's level is above 0 (successes count): failed() and finished(),
        # the only callers that change the level, keep it; the per-message path reads
        # it instead of the Python attribute.
        self._backed_off = False
        self._interval = config.rdy_redistribute_interval
        self._links: dict[str, Link] = {}
        self._life = lifecycle
        self._owner = lifecycle.owner
        self._wheel: TimerWheel | None = None
        #: Set while :meth:`is_starved` is true: a batching handler waits on it.
        self.starved = gevent.event.Event()
        self._starved_names = self.planner.starved_names  # the planner's live set
        self._starved_flag = False  # what ``starved`` was last set to
        self.on_starved: Callable[[], None] | None = None

    def start(self, wheel: TimerWheel) -> None:
        """Redistribute RDY every ``rdy_redistribute_interval`` on ``wheel``."""
        self._wheel = wheel
        wheel.call_every(self._interval, self.redistribute, owner=self._owner)

    # -- per message (the hot path) ------------------------------------------------

    def received(self, link: Link, now: float) -> None:
        """A message arrived on ``link`` at ``now`` (``time.monotonic()``)."""
        flow = link.plan
        commands = self.planner.message_received(flow, now) if flow is not None else ()
        if commands:
            self.send(commands, link)
        # Starved now != the flag. len(): the compiled build reads a set's size in
        # place, while its truth is a generic call.
        elif (len(self._starved_names) > 0) is not self._starved_flag:
            self._update_starved()  # send() with no commands

    def finished(self, link: Link) -> None:
        """A message of ``link`` was finished: its in-flight slot frees; a success for backoff."""
        self._answered(link)
        if self._life.closing:
            if self.in_flight() == 0:
                self._life.drained.set()
            return
        backoff = self.backoff
        if self._backed_off and backoff is not None:  # at level 0 a success changes nothing
            action = backoff.success(_monotonic())
            self._backed_off = backoff.level > 0
            if action is not None:
                self._apply(action)

    def requeued(self, link: Link) -> None:
        """A message of ``link`` was requeued: its in-flight slot frees."""
        self._answered(link)
        if self._life.closing and self.in_flight() == 0:
            self._life.drained.set()

    def _answered(self, link: Link) -> None:
        """The planner counts an answer on ``link`` (the planner's ``message_done``,
        in its two steps): the grant it frees goes out, and a change of starvation.

        The clock is read only for a grant (not per answer).
        """
        flow = link.plan
        if flow is not None and self.planner.answered(flow):
            self.send(self.planner.grant_freed(_monotonic()), link)
        elif (len(self._starved_names) > 0) is not self._starved_flag:  # as in received()
            self._update_starved()  # send() with no commands

    def failed(self) -> None:
        """A handler failed (a requeue with backoff): counts toward backoff, before the REQ."""
        if self.backoff is not None and not self._life.closing:
            # RDY 0 goes out before the REQ, so nsqd cannot hand the
            # failed message straight back inside the backoff window.
            action = self.backoff.failure(time.monotonic())
            self._backed_off = self.backoff.level > 0
            self._apply(action)

    # -- connections -----------------------------------------------------------------

    def add(self, link: Link, max_rdy_count: int) -> None:
        """``link`` subscribed; it gets its share of the budget (its first RDY).

        Its ``unanswered`` set is its in-flight count for the planner (the
        link changes it before each call here); the planner's view of it
        becomes its :attr:`~gnsqlite.consumer.link.Link.plan`, so that no
        message looks it up by name.
        """
        name = link.name
        self._links[name] = link
        commands = self.planner.add(name, max_rdy_count, time.monotonic(), link.unanswered)
        link.plan = self.planner.conns[name]
        self.send(commands)

    def remove(self, name: str) -> None:
        """``name`` is gone; its budget goes to the others."""
        self._links.pop(name, None)
        self.send(self.planner.remove(name, time.monotonic()))
        if self.in_flight() == 0:
            self._life.drained.set()

    def wait_drained(self, timeout: float) -> None:
        """Block up to ``timeout`` seconds until no message is in flight (closing)."""
        drained = self._life.drained
        if self.in_flight() > 0:
            drained.clear()
            if self.in_flight() > 0:
                drained.wait(max(0.0, timeout))

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

    def send(self, commands: Sequence[Command], origin: Link | None = None) -> None:
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
        if action is None or self._life.closing:
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
