"""Lease extension: the one TOUCH rule for messages a consumer holds.

nsqd gives each message it delivers ``msg_timeout`` seconds (negotiated in
IDENTIFY) before it times the message out and delivers it again; TOUCH
restarts that timeout, up to ``max_msg_timeout`` after the delivery (nsqd
caps a TOUCH beyond it, it does not refuse it). A slow handler would lose
its message to a redelivery and the work would be done twice.

:class:`Leases` extends the leases of two kinds of messages, by one rule:

* the messages a handler function runs on: those of the dispatcher's
  ``running`` record (its workers' items), read at each tick, so the
  message path only compares the message's due time with the timer's
  (:meth:`Leases.watch`, copied into the settler);
* those a batch handler's batcher holds, from arrival until the batch
  handler returns (:meth:`Leases.hold`, :meth:`Leases.release_all`).

The rule: a message is touched whenever less than :data:`TOUCH_RATIO` of
its ``msg_timeout`` is left, as long as its lease (nsqd's deadline as the
client knows it) does not yet reach ``bound`` seconds after its delivery,
where ``bound`` is the smaller of the consumer's ``max_lease`` and the
connection's negotiated ``max_msg_timeout``. Then the touching stops and
nsqd decides: the message times out at most ``msg_timeout * TOUCH_RATIO``
after ``bound`` and is redelivered. ``max_lease`` ``0`` or ``None``: no
TOUCH at all. A lease starts at the message's delivery, as the client saw
it: its deadline minus ``msg_timeout`` when the leases first see it (a
handler that touched it itself before the first tick moves that later).

Never a TOUCH after the answer: an answered message, or one whose
connection ended, is not touched, and a single message is touched only
while a worker runs its handler (an async message's owner touches it
itself once the handler returned).

All messages share one timer on the hub's
:class:`~gnsqlite.timers.TimerWheel` (owner: the :class:`Leases`, which
:meth:`Leases.stop` cancels), due when the first of them needs a touch:
no greenlet and no timer per message.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from ..message import Message
from ..timers import Timer, TimerWheel

__all__ = ["TOUCH_RATIO", "Leases", "touch_delay"]

#: A held message is touched when less than this share of its msg_timeout is left.
TOUCH_RATIO: Final = 0.5
#: The touch timer never runs more often than this, in seconds.
_MIN_TOUCH_DELAY = 0.01
#: The lease start of a running message whose lease is over: not touched again.
_OVER = math.inf


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
    ``None``: off, :meth:`watch` and :meth:`hold` do nothing).
    ``count_touch(nsqd)`` counts each TOUCH sent (the consumer's
    ``stats()["by_nsqd"]``). :attr:`running` maps each worker to what it
    runs (the dispatcher's ``running``: single messages in it are leased).
    No method blocks; the timer's callback sends TOUCH without blocking.
    """

    def __init__(
        self, max_lease: float | None, count_touch: Callable[[str], None] = lambda nsqd: None
    ) -> None:
        self.max_lease = max_lease or 0.0
        #: Whether leases are extended at all (``max_lease`` above 0).
        self.enabled = self.max_lease > 0
        self._count_touch = count_touch
        #: worker -> the message (or batch) its handler runs on; set by the consumer.
        self.running: Mapping[Any, object] = {}
        #: batch messages held -> their lease's start (``time.monotonic()`` s)
        self._held: dict[Message, float] = {}
        #: single messages seen running at the last tick -> their lease's start
        #: (``_OVER`` once the lease ended while the handler still runs)
        self._seen: dict[Message, float] = {}
        self._wheel: TimerWheel | None = None
        self._timer: Timer | None = None
        # next_due when the timer is not armed: a message always arms it (inf),
        # or never (-inf, when leases are off).
        self._unarmed = math.inf if self.enabled else -math.inf
        #: When the timer is due (``time.monotonic()`` s; ``inf``: not armed,
        #: ``-inf``: leases are off).
        self.next_due = self._unarmed
        #: TOUCH commands sent.
        self.touches = 0

    def __repr__(self) -> str:
        return f"<Leases held={self.held} touches={self.touches} max_lease={self.max_lease}>"

    @property
    def held(self) -> int:
        """How many messages are leased now: batch messages held, and single
        messages whose handler runs (none when leases are off)."""
        if not self.enabled:
            return 0
        return len(self._held) + sum(isinstance(i, Message) for i in self.running.values())

    def start(self, wheel: TimerWheel) -> None:
        """Use ``wheel`` for the touch timer (the consumer's, at start)."""
        self._wheel = wheel

    # -- the message path ------------------------------------------------------------

    def watch(self, message: Message) -> None:
        """A handler starts on ``message`` (one of :attr:`running`): make sure the
        timer comes before it needs a touch. Never blocks.

        The settler carries a copy of the test (no call in the common case:
        the timer is due earlier already).
        """
        if self.enabled and message._deadline - message.msg_timeout * TOUCH_RATIO < self.next_due:
            self._arm(touch_delay(message, time.monotonic()))

    def hold(self, message: Message) -> None:
        """Extend ``message``'s lease until :meth:`release_all` (the batcher's). Never blocks."""
        if not self.enabled:
            return
        self._held[message] = message._deadline - message.msg_timeout
        self.watch(message)

    def release_all(self, messages: Iterable[Message]) -> None:
        """Stop extending the leases of ``messages`` held by :meth:`hold`. Never blocks."""
        held = self._held
        for message in messages:
            held.pop(message, None)

    # -- the timer -------------------------------------------------------------------

    def _arm(self, delay: float) -> None:
        wheel = self._wheel
        if wheel is None:
            return
        due = wheel.clock() + delay
        if due >= self.next_due:
            return
        if self._timer is not None:
            self._timer.cancel()
        self.next_due = due
        self._timer = wheel.call_later(delay, self._tick, owner=self)

    def _tick(self) -> None:
        """The timer: touch what is due, forget what is done, arm for the next."""
        self._timer = None
        self.next_due = self._unarmed
        now = time.monotonic()
        seen = self._seen
        running: dict[Message, float] = {}
        for item in list(self.running.values()):
            if isinstance(item, Message):
                start = seen.get(item)
                running[item] = item._deadline - item.msg_timeout if start is None else start
        self._seen = running
        delay = math.inf
        for message, start in list(running.items()):
            if start == _OVER:
                continue
            if not self._touch_if_due(message, start, now):
                running[message] = _OVER  # remembered while it runs: never leased again
                continue
            delay = min(delay, touch_delay(message, now))
        held = self._held
        for message, start in list(held.items()):
            if not self._touch_if_due(message, start, now):
                del held[message]
                continue
            delay = min(delay, touch_delay(message, now))
        if delay < math.inf:
            self._arm(delay)

    def _touch_if_due(self, message: Message, start: float, now: float) -> bool:
        """TOUCH ``message`` if it needs it; ``False`` when its lease is over (answered,
        connection gone, or the bound reached: nsqd decides)."""
        if message._responded or message.connection_lost:
            return False
        deadline = message._deadline
        if deadline - message.msg_timeout * TOUCH_RATIO > now:
            return True  # not due yet
        if deadline >= start + min(self.max_lease, _nsqd_bound(message)):
            return False  # the lease reached its bound
        if message.touch():
            self.touches += 1
            self._count_touch(message.nsqd)
        return True

    def stop(self) -> None:
        """Cancel the touch timer and forget every message (the consumer closed)."""
        if self._wheel is not None:
            self._wheel.cancel_owner(self)
        self._timer = None
        self.next_due = self._unarmed
        self._held.clear()
        self._seen.clear()

    def stats(self) -> dict[str, Any]:
        """``max_lease`` (s, ``None`` when off), messages ``held`` now, ``touches`` sent."""
        return {
            "max_lease": self.max_lease if self.enabled else None,
            "held": self.held,
            "touches": self.touches,
        }
