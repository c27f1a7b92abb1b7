"""Settling: the one rule from a handler's result to nsqd's answer.

For a single message and for a batch alike (:meth:`Settler.settle` and
:meth:`Settler.settle_batch` share :meth:`Settler._skips` (which messages
never reach the handler), :func:`finish_handled` (the success step) and
:meth:`Settler._failed` (the rule for a handler that raised)):

* the handler returns: FIN every message it did not answer itself (an async
  one, :meth:`~gnsqlite.message.Message.enable_async`, is left to its owner);
* it raises :class:`~gnsqlite.message.RequeueMessage`: REQ as asked;
* it raises anything else (a ``gevent.Timeout`` of its own included): REQ
  with backoff after :meth:`Settler.requeue_delay`, and, on a message's last
  attempt, a note of the error for the dead-letter envelope;
* ``GreenletExit``/``KeyboardInterrupt``: REQ at once, then unwind.

A message past ``max_attempts`` (:meth:`Settler.gives_up`, the one give-up
test) never reaches the handler: :meth:`Settler.give_up` publishes it to the
dead-letter topic (if any), then calls ``on_giving_up``, then FINs it; if the
publish fails it is requeued and the hook does not run.

A message older than ``max_age`` (:meth:`Settler.expired`, by nsqd's
timestamp, when its handler would start) never reaches the handler either:
:meth:`Settler.expire` publishes it to the dead-letter topic (if any; the
envelope's ``error`` says ``MessageExpired``), then FINs it, and counts it
``expired``; if the publish fails it is requeued.

A message whose connection ended before its handler ran is skipped: nsqd
redelivers it. While a handler function runs, its message's lease is
extended (:class:`~gnsqlite.consumer.lease.Leases`: it reads the
dispatcher's record of what each worker runs; the settler only makes sure
its timer comes in time). Nothing here starts a greenlet or a timer.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from time import perf_counter, time_ns  # bound once: read on the per-message path
from typing import Any, Final

import gevent

from ..config import ConsumerConfig
from ..deadletter import DeadLetterPublisher, HandlerError
from ..message import Message, RequeueMessage, connection_gone
from .lease import TOUCH_RATIO, Leases

__all__ = ["GiveUpHook", "Settler", "finish_handled", "log_giving_up"]

log = logging.getLogger(__name__)

GiveUpHook = Callable[[Message], Any]
_PREVIEW: Final = 64


def finish_handled(message: Message) -> None:
    """The success step: FIN ``message`` unless its handler took it over (async)."""
    if not message._async:  # is_async, without the property call
        message.finish()


def log_giving_up(message: Message) -> None:
    """The default ``on_giving_up``: a WARNING with id, attempts and a body preview."""
    preview = message.body[:_PREVIEW]
    more = "..." if len(message.body) > _PREVIEW else ""
    log.warning(
        "giving up on message %s from %s after %d attempts: %r%s",
        message.id,
        message.nsqd,
        message.attempts,
        preview,
        more,
    )


class Settler:
    """Answers what a handler did with its message(s); see the module docstring.

    ``count_given_up(nsqd)`` counts a message given up (the consumer's
    ``stats()["by_nsqd"]``); ``dead_letters`` is ``None`` without a
    ``dead_letter_topic``. ``count_expired(nsqd)`` counts a message past
    ``max_age``; ``leases`` extends the lease of a message while its handler
    function runs (``None``: not extended; the message must be in the
    leases' ``running`` record while its handler runs, as the dispatcher's
    workers put it). The hook ``on_giving_up`` may be replaced at any
    time. Every method runs in the calling (worker) greenlet and blocks only
    while the handler, the dead-letter publish or the hook does.
    """

    def __init__(
        self,
        config: ConsumerConfig,
        on_giving_up: GiveUpHook | None,
        dead_letters: DeadLetterPublisher | None,
        count_given_up: Callable[[str], None],
        name: object = "consumer",
        *,
        count_expired: Callable[[str], None] = lambda nsqd: None,
        leases: Leases | None = None,
    ) -> None:
        self.max_attempts = config.max_attempts
        # A delivery with more attempts is given up (none when max_attempts is 0).
        self._give_up_above = config.max_attempts or sys.maxsize
        self._delay = config.requeue_delay
        self._max_delay = config.max_requeue_delay
        self.on_giving_up: GiveUpHook = on_giving_up if on_giving_up is not None else log_giving_up
        self.dead_letters = dead_letters
        self._count_given_up = count_given_up
        self._count_expired = count_expired
        self.max_age = config.max_age
        # A message whose timestamp is this many ns old is expired (0: none is).
        self._max_age_ns = 0 if config.max_age is None else max(1, round(config.max_age * 1e9))
        self._leases = leases if leases is not None else Leases(None)
        self._name = name  # for log lines: the consumer's repr
        #: ``timing(seconds)`` after each handler call (a batch's: the whole batch), or ``None``.
        self.timing: Callable[[float], None] | None = None

    # -- the facts ---------------------------------------------------------------

    def gives_up(self, attempts: int) -> bool:
        """Whether a delivery with ``attempts`` is past ``max_attempts`` (0: never).

        The one give-up test: what the settler asks of every message before
        its handler, and of ``attempts + 1`` for a failed last attempt.
        """
        return attempts > self._give_up_above

    def expired(self, message: Message) -> bool:
        """Whether ``message`` is older than ``max_age`` now, by nsqd's timestamp.

        The one age test (``False`` without ``max_age``). The age is this
        host's clock minus nsqd's: keep their clocks in sync (NTP).
        """
        limit = self._max_age_ns
        return bool(limit) and time_ns() - message.timestamp > limit

    def requeue_delay(self, attempts: int) -> float:
        """The REQ delay for a failure without an explicit delay, in seconds."""
        return min(self._delay * max(1, attempts), self._max_delay)

    # -- the rule ----------------------------------------------------------------

    def settle(self, message: Message, handler: Callable[[Message], Any]) -> None:
        """Run ``handler(message)`` and answer it; blocks while the handler runs."""
        # _skips, copied for the per-message path: its three tests without
        # their calls (tests/unit/test_rule_copies.py checks they agree).
        if (
            message.connection.closed
            or message.attempts > self._give_up_above
            or (self._max_age_ns and time_ns() - message.timestamp > self._max_age_ns)
        ):
            self._skips(message)
            return
        timing = self.timing
        started = perf_counter() if timing is not None else 0.0
        # Leases.watch, copied for the per-message path: in the common case the
        # lease timer is due before this message needs a touch (never, when off).
        if message._deadline - message.msg_timeout * TOUCH_RATIO < self._leases.next_due:
            self._leases.watch(message)
        try:
            handler(message)
        except BaseException:
            self._failed(None, message)  # re-raises GreenletExit and the like
        else:
            if not message._async:  # finish_handled, copied for the per-message path
                message.finish()
        if timing is not None:
            self._time(timing, perf_counter() - started)

    def _skips(self, message: Message) -> bool:
        """Whether ``message`` never reaches a handler: True when its connection
        ended (nsqd redelivers it), it expired (older than ``max_age``) or it
        was given up (past ``max_attempts``)."""
        if connection_gone(message.connection):
            log.debug(
                "%s: skipping %s: its connection closed; nsqd redelivers it", self._name, message
            )
            return True
        if self.expired(message):
            self.expire(message)
            return True
        if self.gives_up(message.attempts):
            self.give_up(message)
            return True
        return False

    def settle_batch(
        self, messages: Sequence[Message], handler: Callable[[list[Message]], Any]
    ) -> None:
        """Give up on messages past ``max_attempts``, run ``handler`` on the rest, answer.

        Messages already answered, or whose connection ended, are left out.
        Blocks while the handler runs.
        """
        timing = self.timing
        started = perf_counter() if timing is not None else 0.0
        skips = self._skips
        live = [m for m in messages if not m._responded and not skips(m)]
        if live:
            self._run(live, handler, list(live))  # a list of its own: the handler may keep it
        if timing is not None:
            self._time(timing, perf_counter() - started)

    def _time(self, timing: Callable[[float], None], seconds: float) -> None:
        """``timing(seconds)``; an exception in it is logged: the worker carries on."""
        try:
            timing(seconds)
        except Exception:
            log.exception("%s: handler timing %r failed", self._name, timing)

    def _run(self, messages: Sequence[Message], handler: Callable[[Any], Any], arg: Any) -> None:
        """``handler(arg)`` for a batch (``arg``: the list of ``messages``), then the answers."""
        try:
            handler(arg)
        except BaseException:
            self._failed(messages, arg)
        else:
            for message in messages:
                finish_handled(message)

    def _failed(self, messages: Sequence[Message] | None, arg: Any) -> None:
        """Answer the messages of ``handler(arg)``, which raised; call it in the ``except`` block.

        The rule: :class:`RequeueMessage` requeues as asked; another
        exception (or the handler's own ``gevent.Timeout``) is logged and
        requeues with backoff (dead-lettering a last attempt); what must
        unwind (``GreenletExit``, ``KeyboardInterrupt``) requeues at once and
        is re-raised. ``messages`` ``None``: ``arg`` is one message (no tuple
        is built on the success path).
        """
        try:
            raise  # the exception being handled by the caller
        except RequeueMessage as request:
            if messages is None:
                messages = (arg,)
            for message in messages:
                message.requeue(request.delay, request.backoff)
        except (Exception, gevent.Timeout) as exc:
            # A gevent.Timeout escaping the handler is the handler's own (it
            # ran out of time): a failure like any other.
            if messages is None:
                messages = (arg,)
                log.exception("%s: handler failed on %s; requeueing it", self._name, arg)
            else:
                log.exception("batch handler failed on %d messages; requeueing them", len(messages))
            dead_letters = self.dead_letters
            for message in messages:
                last = self.gives_up(message.attempts + 1)  # its last attempt
                if dead_letters is not None and last and not message.has_responded:
                    dead_letters.handler_failed(message, exc)
                message.requeue(None, True)
        except BaseException:  # GreenletExit, KeyboardInterrupt: answer, then unwind
            for message in (arg,) if messages is None else messages:
                message.requeue(0.0, False)
            raise

    # -- giving up ---------------------------------------------------------------

    def expire(self, message: Message) -> None:
        """Dead-letter (blocks up to ``dead_letter_timeout``) an expired message, then FIN it.

        Without a dead-letter topic it is only finished. A failed publish
        requeues it (it expires again on a later delivery).
        """
        dead_letters = self.dead_letters
        if dead_letters is not None:
            age = (time_ns() - message.timestamp) / 1e9
            why = f"{age:.3f} s old, above max_age={self.max_age} s"
            note = HandlerError("MessageExpired", why)
            if not dead_letters.publish(message, note):
                message.requeue(None, backoff=False)
                return
        log.debug("%s: %s older than max_age: finished unhandled", self._name, message)
        self._count_expired(message.nsqd)
        message.finish()

    def give_up(self, message: Message) -> None:
        """Dead-letter (blocks up to ``dead_letter_timeout``), then the hook, then FIN."""
        dead_letters = self.dead_letters
        if dead_letters is not None and not dead_letters.publish(message):
            message.requeue(None, backoff=False)  # dead-lettered on a later delivery
            return
        try:
            self.on_giving_up(message)
        except (Exception, gevent.Timeout):
            if dead_letters is None:
                log.exception("%s: on_giving_up failed on %s; requeueing it", self._name, message)
                message.requeue(None, backoff=False)
                return
            # It is safe in the dead-letter topic.
            log.exception("%s: on_giving_up failed on dead-lettered %s", self._name, message)
        except BaseException:
            message.requeue(0.0, backoff=False)
            raise
        self._count_given_up(message.nsqd)
        message.finish()
