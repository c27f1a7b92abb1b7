"""``gnsqlite pub --from-dead-letter TOPIC``: re-publish dead letters to their topic.

Reads the dead-letter topic on a channel (``redrive`` by default) from the
nsqd given, or from every nsqd nsqlookupd lists with that topic (and then
publishes through nsqlookupd's nsqd too), decodes each message as a
dead-letter envelope (:mod:`gnsqlite.deadletter`) and publishes its
original body to its original topic (or to ``--to TOPIC``; raw dead
letters, which carry no topic, need ``--to``). A dead letter is
finished only once that publish succeeded; when one fails, or a message
is not an envelope and no ``--to`` was given, it is requeued and the
command stops with an error (exit 1). It stops by itself after ``-n``
messages or when nothing arrived for ``--idle-timeout`` seconds (exit 0),
or on Ctrl-C (exit 130). Each re-published message prints a line with its
id (the original message's, from the envelope) and attempts.
"""

from __future__ import annotations

import collections
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

import gevent.event

from ..consumer import Consumer
from ..deadletter import decode_envelope
from ..errors import EnvelopeError, NSQError
from ..http import LookupdClient
from ..message import Message, RequeueMessage
from ..producer import Producer
from ..protocol import check_channel_name, check_topic_name
from ._common import (
    EXIT_INTERRUPTED,
    CommandError,
    reach_addresses,
    reach_error,
    stop_on_signals,
    topology_addresses,
)

__all__ = ["redrive"]

#: How long to wait for the subscription before giving up, in seconds.
_SUBSCRIBE_TIMEOUT = 15.0
#: Dead letters held at once, over every nsqd read (handled one at a time). Below the
#: number of nsqd, some connections would wait at RDY 0 for the consumer's next
#: redistribution, which can come after ``--idle-timeout``: their letters left unread.
_IN_FLIGHT = 64


class _Redrive:
    """The handler: decode, publish, count; the first failure stops everything."""

    def __init__(self, producer: Producer, to: str | None, count: int) -> None:
        self.producer = producer
        self.to = to
        self.count = count
        self.done = 0
        self.by_topic: collections.Counter[str] = collections.Counter()
        self.failure: str | None = None
        self.busy = 0
        self.last_activity = time.monotonic()
        self.stop = gevent.event.Event()
        #: Stops the flow (``RDY 0``); the command sets it once the consumer exists.
        self.pause: Callable[[], None] = lambda: None

    def __call__(self, message: Message) -> None:
        if self.stop.is_set():
            raise RequeueMessage(0.0)  # not re-published: back to the channel
        self.busy += 1
        try:
            self._redrive(message)
        finally:
            self.busy -= 1
            self.last_activity = time.monotonic()

    def _redrive(self, message: Message) -> None:
        try:
            letter = decode_envelope(message.body)
        except EnvelopeError as exc:
            if self.to is None:
                self._fail(f"message {message.id} is {exc}; give --to TOPIC for raw dead letters")
            topic, body, ident, attempts = self.to, message.body, message.id, message.attempts
        else:
            topic, body, ident, attempts = (
                self.to or letter.topic,
                letter.body,
                letter.id,
                letter.attempts,
            )
        try:
            self.producer.publish(topic, body)
        except (NSQError, ValueError) as exc:
            self._fail(f"re-publishing message {message.id} to {topic!r} failed: {exc}")
        self.done += 1
        self.by_topic[topic] += 1
        print(f"re-published {ident} (attempts {attempts}) to {topic!r}", flush=True)
        if self.count and self.done >= self.count:
            self._stop()

    def _fail(self, why: str) -> NoReturn:
        if self.failure is None:
            self.failure = " ".join(why.split())
        self._stop()
        raise RequeueMessage(0.0)  # the dead letter stays in the channel

    def _stop(self) -> None:
        """Stop: RDY 0 goes out before this handler's FIN or REQ, so nsqd sends no more.

        Otherwise nsqd, still counting RDY 64, hands a letter requeued here
        straight back, and may write it after the ``CLOSE_WAIT`` that ends
        the connection: unread, it stays in flight for nsqd's
        ``--msg-timeout`` (a run just after found nothing).
        """
        if not self.stop.is_set():
            self.pause()
            self.stop.set()


def _listed(topic: str, lookupds: list[str]) -> bool:
    """Whether any of ``lookupds`` lists an nsqd with ``topic``; blocks up to 5 s each."""
    for address in lookupds:
        try:
            if LookupdClient(address, timeout=5.0).lookup(topic).get("producers"):
                return True
        except NSQError as exc:
            raise reach_error("nsqlookupd", address, exc) from None
    return False


def redrive(args: Any) -> int:
    """Run ``gnsqlite pub --from-dead-letter``; blocks until done (see the module docstring)."""
    source = check_topic_name(args.from_dead_letter)
    channel = check_channel_name(args.channel or "redrive")
    to = None if args.to is None else check_topic_name(args.to)
    if to == source:
        raise CommandError(f"--to {to!r} is the dead-letter topic read: use the original topic", 2)
    count = args.count or 0
    idle_timeout = 2.0 if args.idle_timeout is None else args.idle_timeout
    if count < 0:
        raise CommandError("-n must be 0 (no limit) or more", 2)
    if not idle_timeout > 0:
        raise CommandError(f"--idle-timeout {idle_timeout} is out of range: use above 0", 2)
    nsqds, lookupds = topology_addresses(args)
    reach_addresses(nsqds, lookupds)
    if lookupds and not _listed(source, lookupds):
        print(f"re-published 0 dead letters from {source!r}: no nsqd nsqlookupd lists has it")
        return 0
    producer = Producer(nsqds, lookupd_http_addresses=lookupds, timeout=30.0)
    handler = _Redrive(producer, to, count)
    consumer = Consumer(
        source,
        channel,
        handler,
        nsqd_tcp_addresses=nsqds,
        lookupd_http_addresses=lookupds,
        max_in_flight=_IN_FLIGHT,
        concurrency=1,
        max_attempts=0,
        backoff=None,
    )
    handler.pause = lambda: consumer.set_max_in_flight(0)
    interrupted = gevent.event.Event()
    with stop_on_signals(interrupted), producer:
        consumer.start()
        try:
            if not consumer.connected.wait(_SUBSCRIBE_TIMEOUT):
                where = ", ".join(nsqds) or "the nsqd nsqlookupd lists"
                raise CommandError(f"could not subscribe to {source!r} on {where}")
            handler.last_activity = time.monotonic()
            while not (handler.stop.is_set() or interrupted.is_set()):
                idle = time.monotonic() - handler.last_activity
                if not handler.busy and idle >= idle_timeout:
                    break
                # busy: a publish is under way; look again after a full idle period
                left = idle_timeout if handler.busy else idle_timeout - idle
                gevent.wait([handler.stop, interrupted], timeout=max(left, 0.01), count=1)
        finally:
            consumer.close(timeout=10.0)
    if handler.failure is not None:
        raise CommandError(f"{handler.failure} (requeued; {handler.done} re-published before)")
    topics = ", ".join(f"{t}: {n}" for t, n in sorted(handler.by_topic.items())) or "none"
    print(f"re-published {handler.done} dead letters from {source!r} ({topics})", file=sys.stdout)
    return EXIT_INTERRUPTED if interrupted.is_set() else 0
