"""Lease extension: the one TOUCH rule for messages a consumer holds.

nsqd gives each message it delivers ``msg_timeout`` seconds (negotiated in
IDENTIFY) before it times the message out and delivers it again; TOUCH
restarts that timeout, up to ``max_msg_timeout`` after the delivery (nsqd
caps a TOUCH beyond it, it does not refuse it). A slow handler would lose
its message to a redelivery and the work would be done twice.

:class:`Leases` holds the messages a handler function runs on (the
settler, while ``handler(message)`` runs) and those a batch handler's
batcher holds (from arrival until the batch handler returns): one rule for
both. A held message is touched whenever less than :data:`TOUCH_RATIO` of
its ``msg_timeout`` is left, as long as its lease (nsqd's deadline as the
client knows it) does not yet reach ``bound`` seconds after its delivery,
where ``bound`` is the smaller of the consumer's ``max_lease`` and the
connection's negotiated ``max_msg_timeout``. Then the touching stops and
nsqd decides: the message times out at most ``msg_timeout * TOUCH_RATIO``
after ``bound`` and is redelivered. ``max_lease`` ``0`` or ``None``: no
TOUCH at all.

Never a TOUCH after the answer: an answered message, or one whose
connection ended, is let go at the next tick and not touched
(:meth:`~gnsqlite.message.Message.touch` says so too), and the settler lets
go of a message as soon as its handler returns (an async message's owner
touches it itself).

All held messages share one timer on the hub's
:class:`~gnsqlite.timers.TimerWheel` (owner: the :class:`Leases`, which
:meth:`Leases.stop` cancels), due when the first of them needs a touch:
no greenlet and no timer per message.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..message import Message
from ..timers import Timer, TimerWheel

__all__ = ["Leases", "TOUCH_RATIO"]

#: A held message is touched when less than this share of its msg_timeout is left.
TOUCH_RATIO = 0.5
#: The touch timer never runs more often than this, in seconds.
_MIN_TOUCH_DELAY = 0.01


def _nsqd_bound(message: Message) -> float:
    """nsqd's ``max_msg_timeout`` for ``message`` (seconds; ``inf`` when its connection
    does not say, e.g. a message built by hand)."""
    bound = getattr(message.connection, "max_msg_timeout", math.inf)
    return bound if isinstance(bound, (int, float)) else math.inf


def touch_delay(message: Message, now: float) -> float:
    """Seconds from ``now`` (``time.monotonic()``) until ``message`` needs a touch."""
    return max(_MIN_TOUCH_DELAY, message._deadline - message.msg_timeout * TOUCH_RATIO - now)


class Leases:
    """The messages whose leases a consumer extends; see the module docstring.

    ``max_lease`` in seconds (``inf``: as long as nsqd allows; ``0`` or
    ``None``: off, :meth:`hold` does nothing). ``count_touch(nsqd)`` counts
    each TOUCH sent (the consumer's ``stats()["by_nsqd"]``). :meth:`hold`
    and :meth:`release` never block; the timer's callback sends TOUCH
    without blocking.
    """

    def __init__(
        self, max_lease: float | None, count_touch: Callable[[str], None] = lambda nsqd: None
    ) -> None:
        self.max_lease = max_lease or 0.0
        #: Whether leases are extended at all (``max_lease`` above 0).
        self.enabled = self.max_lease > 0
        self._count_touch = count_touch
        #: held message -> its delivery time (``time.monotonic()`` s), when the lease began
        self._held: dict[Message, float] = {}
        self._wheel: TimerWheel | None = None
        self._timer: Timer | None = None
        #: TOUCH commands sent.
        self.touches = 0

    def __repr__(self) -> str:
        return f"<Leases held={len(self._held)} touches={self.touches} max_lease={self.max_lease}>"

    @property
    def held(self) -> int:
        """How many messages are held now."""
        return len(self._held)

    def start(self, wheel: TimerWheel) -> None:
        """Use ``wheel`` for the touch timer (the consumer's, at start)."""
        self._wheel = wheel

    def hold(self, message: Message) -> None:
        """Extend ``message``'s lease until :meth:`release` (or its answer). Never blocks.

        Its lease began at its delivery: its deadline minus ``msg_timeout``
        (nothing touched it yet when a handler or the batcher takes it).
        """
        if not self.enabled:
            return
        deadline = message._deadline
        self._held[message] = deadline - message.msg_timeout
        timer = self._timer
        if (
            timer is not None
            and timer.active
            and timer.deadline <= deadline - message.msg_timeout * TOUCH_RATIO
        ):
            return  # the common case, decided without reading the clock
        self._arm(touch_delay(message, time.monotonic()))

    def release(self, message: Message) -> None:
        """Stop extending ``message``'s lease (its handler returned). Never blocks."""
        self._held.pop(message, None)

    def release_all(self, messages: Iterable[Message]) -> None:
        """:meth:`release` each of ``messages``. Never blocks."""
        held = self._held
        for message in messages:
            held.pop(message, None)

    def _arm(self, delay: float) -> None:
        wheel = self._wheel
        if wheel is None:
            return
        timer = self._timer
        if timer is not None and timer.active:
            if timer.deadline <= wheel.clock() + delay:
                return
            timer.cancel()
        self._timer = wheel.call_later(delay, self._touch, owner=self)

    def _touch(self) -> None:
        """The timer: TOUCH each held message that needs it; let go of those whose
        lease is over or that were answered; re-arm for the next."""
        self._timer = None
        now = time.monotonic()
        held = self._held
        max_lease = self.max_lease
        delay: float | None = None
        for message, delivered in list(held.items()):
            if message._responded or message.connection_lost:
                del held[message]
                continue
            if message._deadline - message.msg_timeout * TOUCH_RATIO <= now:
                bound = delivered + min(max_lease, _nsqd_bound(message))
                if message._deadline >= bound:
                    del held[message]  # the lease reached its bound: nsqd decides
                    continue
                if message.touch():
                    self.touches += 1
                    self._count_touch(message.nsqd)
            left = touch_delay(message, now)
            delay = left if delay is None else min(delay, left)
        if delay is not None:
            self._arm(delay)

    def stop(self) -> None:
        """Cancel the touch timer and let go of every message (the consumer closed)."""
        if self._wheel is not None:
            self._wheel.cancel_owner(self)
        self._timer = None
        self._held.clear()

    def stats(self) -> dict[str, Any]:
        """``max_lease`` (s, ``None`` when off), messages ``held`` now, ``touches`` sent."""
        return {
            "max_lease": self.max_lease if self.enabled else None,
            "held": len(self._held),
            "touches": self.touches,
        }
