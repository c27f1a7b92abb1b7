"""Batch handlers: a Consumer hands its messages over in lists.

::

    def store(messages):             # list[Message], one batch
        db.executemany("INSERT ...", [(m.body,) for m in messages])
        db.commit()                  # returning finishes every message not yet answered

    consumer = Consumer("clicks", "archive", batch_handler=store,
                        batch_size=100, batch_timeout=1.0, max_in_flight=200, ...)

A :class:`Batcher` collects the messages a consumer receives (from every
nsqd it reads: batches mix connections) and hands a batch to a worker
greenlet of the consumer when

* it holds ``batch_size`` messages (``"full"``);
* ``batch_timeout`` seconds passed since its first message (``"timeout"``),
  on a timer of the hub's :class:`~gnsqlite.timers.TimerWheel`;
* the consumer is *starved* (``"starved"``): a connection's in-flight count
  reached 85% of its RDY (the client-library guide's ``is_starved``), so
  little or nothing more can arrive until some messages are answered, and
  no batch handed over earlier is still queued or running (when one is, its
  answers will let more messages in: the batch being collected keeps
  filling meanwhile instead of going out in scraps). Checked as each
  message arrives, when a batch's handler returns, and whenever the
  consumer's ``starved`` Event is set (a backoff window's ``RDY 0`` starves
  every connection that holds messages).

Answering: the handler's return finishes every message of the batch it has
not answered itself; an exception requeues them with backoff, exactly as a
failing single handler does (:class:`~gnsqlite.message.RequeueMessage` as
asked); a message the handler answered, or made async with
:meth:`~gnsqlite.message.Message.enable_async`, is left alone on return.
Each message is answered on the connection it came on. A message past
``max_attempts`` never reaches the handler: it goes to the consumer's
give-up path, one by one. A message whose connection died before its batch
ran is left out (nsqd redelivers it).

TOUCH: while the batcher holds a message (waiting for its batch, queued, or
in the running handler) its lease is extended by the consumer's
:class:`~gnsqlite.consumer.lease.Leases`, the same rule as for a handler
function: touched whenever less than half of its ``msg_timeout`` (nsqd's,
from IDENTIFY) is left, up to ``max_lease`` (nsqd's ``--max-msg-timeout``,
15 min by default, unless lower), so neither a long ``batch_timeout`` nor a
slow handler lets nsqd time it out.

On close the batch being collected is requeued at once (``REQ`` with no
delay, like every message received but not started); batches already
handed to the handler run to the end within the close timeout.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..message import Message
from ..options import Validated, option
from ..timers import Timer, TimerWheel
from .lease import Leases
from .link import Intake

__all__ = ["Batch", "BatchConfig", "BatchHandler", "Batcher", "REASONS", "messages_of"]

log = logging.getLogger(__name__)

BatchHandler = Callable[[list[Message]], Any]

#: Why a batch was handed over.
REASONS = ("full", "timeout", "starved")


@dataclass(frozen=True, kw_only=True)
class BatchConfig(Validated):
    """A batch handler's options: ``batch_size`` messages, ``batch_timeout`` seconds."""

    batch_size: int = option(100, int, lo=1)
    batch_timeout: float = option(1.0, float, lo=0.001, unit="s")

    @classmethod
    def for_consumer(
        cls,
        handler: object,
        batch_handler: object,
        batch_size: int | None,
        batch_timeout: float | None,
        max_in_flight: int,
    ) -> BatchConfig | None:
        """Check a Consumer's batch options; ``None`` when it has no batch handler.

        Raises :class:`~gnsqlite.errors.ConfigError` saying what to fix.
        """
        if batch_handler is None:
            options = (("batch_size", batch_size), ("batch_timeout", batch_timeout))
            given = [name for name, value in options if value is not None]
            if given:
                raise ConfigError(
                    f"{' and '.join(given)} given without batch_handler: pass"
                    " batch_handler=fn (fn(messages) gets a list) or leave them out"
                )
            return None
        if handler is not None:
            raise ConfigError(
                "handler and batch_handler given together: pass one (handler gets one"
                " message, batch_handler a list)"
            )
        if not callable(batch_handler):
            raise ConfigError(f"batch_handler={batch_handler!r} must be callable")
        if batch_size is None:
            raise ConfigError("batch_handler needs batch_size=N: how many messages a batch holds")
        timeout = {} if batch_timeout is None else {"batch_timeout": batch_timeout}
        config = cls(batch_size=batch_size, **timeout)
        if max_in_flight < config.batch_size:
            raise ConfigError(
                f"max_in_flight={max_in_flight} is below batch_size={config.batch_size}:"
                " nsqd sends no more than max_in_flight unanswered messages, so a batch"
                f" could never fill; raise max_in_flight to {config.batch_size} or more"
                f" (2 x batch_size = {2 * config.batch_size} keeps batches full while one"
                " is handled) or lower batch_size"
            )
        return config


class Batch:
    """Messages handed over together, and why (a key of :data:`REASONS`)."""

    __slots__ = ("messages", "reason")

    def __init__(self, messages: list[Message], reason: str) -> None:
        self.messages = messages
        self.reason = reason

    def __repr__(self) -> str:
        return f"<Batch of {len(self.messages)} ({self.reason})>"


def messages_of(item: Message | Batch) -> Sequence[Message]:
    """The messages of a consumer's work item: a single message or a batch."""
    return item.messages if isinstance(item, Batch) else (item,)


class Batcher(Intake):
    """Collects a consumer's messages into batches and runs its batch handler.

    ``dispatch(batch)`` queues a batch for a worker (it must not block);
    ``is_starved()`` is the consumer's starvation test; ``settle(messages,
    handler)`` runs the handler on a batch's messages and answers them (the
    consumer's :meth:`Settler.settle_batch
    <gnsqlite.consumer.settle.Settler.settle_batch>`: the give-up test, the
    result -> answer rule and the dead-letter note live there, not here).
    :meth:`add` and :meth:`starved` never block; :meth:`run` runs the
    handler and blocks while it does. ``leases`` extends the leases of the
    messages it holds (the consumer's; default: its own, as long as nsqd
    allows). The batch timeout's timer is the batcher's; :meth:`stop`
    cancels it and the touches.
    """

    def __init__(
        self,
        handler: BatchHandler,
        config: BatchConfig,
        *,
        dispatch: Callable[[Batch], None],
        is_starved: Callable[[], bool],
        settle: Callable[[Sequence[Message], BatchHandler], None],
        leases: Leases | None = None,
    ) -> None:
        self.handler = handler
        self.batch_size = config.batch_size
        self.batch_timeout = config.batch_timeout
        self._dispatch = dispatch
        self._is_starved = is_starved
        self._settle = settle
        self._pending: list[Message] = []
        # Holds what is handed to the batcher, until it is through run().
        self._leases = leases if leases is not None else Leases(math.inf)
        self._wheel: TimerWheel | None = None
        self._expiry: Timer | None = None
        self._closed = False
        self._outstanding = 0  # batches handed over and not yet through run()
        #: Batches handed over, by reason.
        self.handed_over = dict.fromkeys(REASONS, 0)

    def start(self, wheel: TimerWheel) -> None:
        """Use ``wheel`` for the batch timeout and touches (the consumer's, at start)."""
        self._wheel = wheel
        self._leases.start(wheel)

    # -- collecting (reader greenlets, timers) ---------------------------------

    def add(self, message: Message) -> None:
        """Add a received message to the batch being collected. Never blocks."""
        if self._closed:
            message.requeue(0.0, backoff=False)
            return
        self._pending.append(message)
        self._leases.hold(message)
        if len(self._pending) >= self.batch_size:
            self._flush("full")
        elif self._stalled():
            self._flush("starved")
        elif len(self._pending) == 1 and self._wheel is not None:
            self._expiry = self._wheel.call_later(self.batch_timeout, self._expire, owner=self)

    enqueue = add  # what the links call it (Intake)

    def starved(self) -> None:
        """The consumer just became starved: hand the pending batch over. Never blocks.

        Deferred to a timer callback (due at once), so that a message whose
        arrival starved the consumer joins the batch first.
        """
        if self._pending and self._wheel is not None and not self._closed:
            self._wheel.call_later(0.0, self._flush_if_starved, owner=self)

    def _stalled(self) -> bool:
        """Starved, and no batch handed over earlier will be answered to let more in."""
        return self._outstanding == 0 and self._is_starved()

    def _flush_if_starved(self) -> None:
        if self._pending and not self._closed and self._stalled():
            self._flush("starved")

    def _expire(self) -> None:
        self._expiry = None
        if self._pending:
            self._flush("timeout")

    def _flush(self, reason: str) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        batch = Batch(self._pending, reason)
        self._pending = []
        self.handed_over[reason] += 1
        self._outstanding += 1
        self._dispatch(batch)

    # -- running (worker greenlets) ----------------------------------------------

    def run(self, batch: Batch) -> None:
        """Settle ``batch`` with the handler (the consumer's one rule), then count it done.

        Blocks while the handler runs (in the consumer's worker greenlet).
        """
        try:
            self._settle(batch.messages, self.handler)
        finally:
            self._leases.release_all(batch.messages)
            self._outstanding = max(0, self._outstanding - 1)
        self._flush_if_starved()

    # -- closing -----------------------------------------------------------------

    def close(self) -> None:
        """Stop collecting: requeue the pending batch (no delay, no backoff). Never blocks.

        Touches go on for batches already handed over until :meth:`stop`.
        """
        self._closed = True
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        pending, self._pending = self._pending, []
        for message in pending:
            message.requeue(0.0, backoff=False)
        self._leases.release_all(pending)

    def stop(self) -> None:
        """Cancel every timer of the batcher and its touches (the consumer closed)."""
        self.close()
        if self._wheel is not None:
            self._wheel.cancel_owner(self)
        self._leases.stop()

    def stats(self) -> dict[str, Any]:
        """The options, the batch being collected, batches handed over by reason, touches."""
        return {
            "batch_size": self.batch_size,
            "batch_timeout": self.batch_timeout,
            "pending": len(self._pending),
            "held": self._leases.held,
            "handed_over": dict(self.handed_over),
            "touches": self._leases.touches,
        }
