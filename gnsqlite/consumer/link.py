"""A Link: one subscribed connection, as the consumer knows it.

The link is both ends of a message's trip through the consumer:

* its :meth:`Link.on_message` is the :class:`~gnsqlite.connection.Connection`'s
  ``on_message`` callback (where the connection reads, the hub or the
  reader greenlet: complete the :class:`~gnsqlite.message.Message`, count
  it, tell flow control, hand it to the dispatcher or the batcher; never
  blocks, never runs handler code);
* it is the message's responder: :meth:`Message.finish()
  <gnsqlite.message.Message.finish>` calls :meth:`Link.on_finish` directly,
  which writes FIN on its own connection and tells flow control. No lookup
  by connection name on the way back.

The link is the one record of a subscribed connection in the consumer:
flow control sends its RDY counts to it, the link set keeps it by name.
``unanswered`` is the one record of its messages received and not yet
answered: close() requeues them (async ones too), and the planner's view of
the link, its :class:`~gnsqlite.flow.LinkPlan` (:attr:`Link.plan`), reads
its in-flight count as the set's size (flow control hands the set to the
planner when the link subscribes). So the set changes before flow control
hears of a message or an answer. The rest of its flow (RDY, when the last
message came) is the planner's. A link that left (its connection ended) is
``active`` no more: answers on it are still written when the connection
can take them, and counted nowhere.

Where a link's events go is one :class:`LinkRoutes` per consumer, shared by
its links (so this module knows neither flow control nor the dispatcher).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple, Protocol

from .._mypyc import mypyc_attr
from ..connection import Connection
from ..errors import NSQConnectionError
from ..flow import LinkPlan
from ..message import Message, ResponderBase, deliver
from ..protocol import defaults
from .lifecycle import Lifecycle

__all__ = ["FlowEvents", "Intake", "Link", "LinkConnection", "LinkRoutes"]

log = logging.getLogger(__name__)

_monotonic: Final = time.monotonic


class LinkConnection(Protocol):
    """What a link uses of its :class:`~gnsqlite.connection.Connection`.

    Written out so the link depends on these and no more (a test hands it a
    recording fake). The link types its connection as ``Connection |
    LinkConnection``: the compiled build calls a :class:`Connection` directly
    (a native call, after an isinstance test) and anything else through
    Python's calling convention, so a fake still works.
    ``msg_timeout`` is in seconds, ``last_received`` a ``time.monotonic()``
    reading; none of the methods but ``close`` blocks (they queue their command).
    """

    @property
    def name(self) -> str: ...

    @property
    def msg_timeout(self) -> float: ...

    @property
    def last_received(self) -> float: ...

    @property
    def closed(self) -> bool: ...

    def ready(self, count: int) -> None: ...

    def finish(self, message_id: bytes | str, now: bool = False) -> None: ...

    def finish_many(self, message_ids: Sequence[bytes | str]) -> None: ...

    def requeue(self, message_id: bytes | str, delay: float = 0.0) -> None: ...

    def touch(self, message_id: bytes | str) -> None: ...

    def start_close(self) -> None: ...

    def close(self, timeout: float | None = None) -> None:
        """Close the connection; blocks up to ``timeout`` seconds."""


@mypyc_attr(allow_interpreted_subclasses=True)  # the compiled build: a test may subclass it
class FlowEvents:
    """What flow control hears from the links: each message and each answer (none blocks).

    :class:`~gnsqlite.consumer.flow_control.FlowControl` is one. A class of
    its own, not a protocol, so that the compiled build calls it directly (a
    C call through the class's method table, not Python's calling
    convention) on the per-message path.
    """

    __slots__ = ()

    def received(self, link: Link, now: float) -> None:
        """A message arrived on ``link`` at ``now`` (``time.monotonic()`` seconds)."""
        raise NotImplementedError

    def finished(self, link: Link) -> None:
        """A message of ``link`` was finished."""
        raise NotImplementedError

    def requeued(self, link: Link) -> None:
        """A message of ``link`` was requeued."""
        raise NotImplementedError

    def failed(self) -> None:
        """A handler failed: a requeue with backoff follows."""
        raise NotImplementedError


@mypyc_attr(allow_interpreted_subclasses=True)  # the compiled build: the batcher is pure Python
class Intake:
    """What takes each message the links receive (none blocks): the consumer's dispatcher,
    or its batcher when it hands out batches.

    A class of its own, as :class:`FlowEvents` is, so that the compiled build
    calls the dispatcher directly on the per-message path.
    """

    __slots__ = ()

    def enqueue(self, message: Message) -> None:
        """Take ``message``, just received and counted; never blocks."""
        raise NotImplementedError


class LinkRoutes(NamedTuple):
    """Where the links of one consumer send their events (none of them blocks).

    ``flow`` (flow control) hears of each message and answer (see
    :class:`FlowEvents`); ``intake`` takes each received message (see
    :class:`Intake`);
    ``requeue_delay(attempts)`` is the settler's delay for a REQ without
    one, in seconds; ``observers`` is the consumer's live list of message
    observers; ``lifecycle`` says whether the consumer is closing.
    """

    flow: FlowEvents
    intake: Intake
    requeue_delay: Callable[[int], float]
    observers: list[Callable[[Message], object]]
    lifecycle: Lifecycle


class Link(ResponderBase):
    """One subscribed connection and its counts; see the module docstring.

    ``routes`` says where its events go (:class:`LinkRoutes`: the same for
    every link of a consumer). The constructor opens no socket: :attr:`conn`
    is attached by the link set.
    """

    # The routes are kept one per slot: read once per message, no tuple lookup.
    __slots__ = (
        "active",
        "address",
        "conn",
        "discovered",
        "finished",
        "flow",
        "intake",
        "lifecycle",
        "msg_timeout",
        "name",
        "observers",
        "plan",
        "received",
        "requeue_delay",
        "requeued",
        "unanswered",
    )

    def __init__(self, address: str, discovered: bool, routes: LinkRoutes) -> None:
        self.address = address
        self.discovered = discovered
        (
            self.flow,
            self.intake,
            self.requeue_delay,
            self.observers,
            self.lifecycle,
        ) = routes
        self.conn: Connection | LinkConnection = None  # type: ignore[assignment]  # attached before connect()
        self.name = address
        self.msg_timeout = defaults.MSG_TIMEOUT  # until IDENTIFY says otherwise
        self.active = False  # subscribed and counted (in the link set)
        self.received = 0
        self.finished = 0
        self.requeued = 0
        self.unanswered: set[Message] = set()  # received, not yet finished or requeued
        #: The planner's view of it, set when flow control counts it (no lookup by name).
        self.plan: LinkPlan | None = None

    def __repr__(self) -> str:
        return f"<Link {self.name} {'active' if self.active else 'inactive'}>"

    def attach(self, conn: Connection | LinkConnection) -> None:
        """Use ``conn`` (not yet connected); its callbacks already point here."""
        self.conn = conn
        self.name = conn.name

    def subscribed(self) -> None:
        """SUB succeeded: read what IDENTIFY negotiated once, and start counting."""
        self.msg_timeout = self.conn.msg_timeout  # negotiated: read once, not per message
        self.active = True

    # -- the connection's callback (the hub or the reader greenlet) ---------------

    def on_message(self, conn: Connection | LinkConnection, message: Message) -> None:
        """Count, hand over. Runs in the hub or the reader greenlet; never blocks.

        ``message`` is as the frame decoder built it (the connection's
        ``message_class`` is :class:`~gnsqlite.message.Message`);
        :func:`~gnsqlite.message.deliver` completes it. Its deadline and flow
        control's clock start when its bytes were read
        (``conn.last_received``, ``time.monotonic()`` seconds).
        """
        if not self.active:
            deliver(message, self.name, self, conn.msg_timeout, conn, _monotonic())
            message.requeue(0.0, backoff=False)  # not counted, so on_requeue counts nothing
            return
        now = conn.last_received  # when its bytes were read: no clock read per message
        deliver(message, self.name, self, self.msg_timeout, conn, now)
        self.received += 1
        self.unanswered.add(message)  # first: the planner reads its size
        self.flow.received(self, now)
        if self.lifecycle.closing:
            message.requeue(0.0, backoff=False)  # takes it out of unanswered again
            return
        if self.observers:
            self._observe(message)
        self.intake.enqueue(message)

    def _observe(self, message: Message) -> None:
        for observer in self.observers:
            try:
                observer(message)
            except Exception:
                log.exception("%s: message observer %r failed", self, observer)

    # -- the message's responder -------------------------------------------------------

    def on_finish(self, message: Message) -> None:
        """FIN ``message`` and count a success; called by :meth:`Message.finish`. Never blocks.

        The FIN of the connection's last message in flight goes out at once:
        no other answer of this turn would share its write, and nsqd starts
        on the next message while the counting below runs (at
        ``max_in_flight=1``, every FIN).
        """
        try:  # _quietly, written out for the per-message path (the same except clause)
            self.conn.finish(message.wire_id, len(self.unanswered) <= 1)
        except NSQConnectionError as exc:
            log.debug("%s: not sent (%s); nsqd redelivers what is unanswered", self, exc)
        if self.active:
            self.unanswered.discard(message)
            self.finished += 1
            self.flow.finished(self)

    def on_finish_many(self, messages: Sequence[Message]) -> None:
        """FIN ``messages`` (all received on this link) in one write and count them.

        :func:`~gnsqlite.message.finish_all` calls it. Never blocks.
        """
        self._quietly(self.conn.finish_many, [message.wire_id for message in messages])
        if self.active:
            self.unanswered.difference_update(messages)
            self.finished += len(messages)
            flow = self.flow
            for _ in messages:
                flow.finished(self)

    def on_requeue(self, message: Message, delay: float | None, backoff: bool) -> None:
        """REQ ``message`` after ``delay`` seconds (``None``: the settler's delay).

        With ``backoff``, the failure counts toward the consumer's backoff
        first. Called by :meth:`Message.requeue`. Never blocks.
        """
        active = self.active
        if active:
            self.unanswered.discard(message)
            if backoff:
                self.flow.failed()
        if delay is None:
            delay = self.requeue_delay(message.attempts)
        self._quietly(self.conn.requeue, message.wire_id, delay)
        if active:
            self.requeued += 1
            self.flow.requeued(self)

    def on_touch(self, message: Message) -> None:
        """TOUCH ``message``; called by :meth:`Message.touch`. Never blocks."""
        self._quietly(self.conn.touch, message.wire_id)

    def ready(self, count: int) -> None:
        """RDY ``count`` (flow control's command). Never blocks."""
        self._quietly(self.conn.ready, count)  # sent only when the count changes

    def _quietly(self, send: Callable[..., None], *args: Any) -> None:
        try:
            send(*args)
        except NSQConnectionError as exc:
            log.debug("%s: not sent (%s); nsqd redelivers what is unanswered", self, exc)

    # -- leaving -----------------------------------------------------------------------

    def start_close(self) -> None:
        """Send ``CLS`` (nsqd stops sending; answers remain allowed). Never blocks."""
        self._quietly(self.conn.start_close)

    def leave(self) -> None:
        """The connection ended or the consumer closed: stop counting answers here.

        Its unanswered messages can no longer be answered (nsqd redelivers them).
        """
        self.active = False
        self.unanswered.clear()

    def counts(self) -> dict[str, int]:
        """``received``/``finished``/``requeued`` since it subscribed."""
        return {"received": self.received, "finished": self.finished, "requeued": self.requeued}
