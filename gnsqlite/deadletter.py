"""Dead-letter topics: where a Consumer puts the messages it gives up on.

A :class:`~gnsqlite.consumer.Consumer` with ``dead_letter_topic="orders.dead"``
publishes each message whose attempts exceed ``max_attempts`` to that topic,
and finishes it only once nsqd accepted the publish. If the publish fails
(nsqd down, a timeout, an error) the message is requeued instead, and
dead-lettered on a later delivery: nothing is lost. Delivery to the
dead-letter topic is at-least-once (a publish answered after the consumer
stopped waiting, or a FIN lost with its connection, gives a duplicate).

The dead letter is the original body (the default) or, with
``dead_letter_envelope=True``, a JSON object, one per message, with the
format tag ``"format": "gnsqlite.dead-letter/1"``:

* ``topic``, ``channel``: where the message was consumed;
* ``id``: nsqd's 16-character message id;
* ``attempts``: the delivery count when it was given up;
* ``timestamp``: when nsqd first received it, ns since the epoch;
* ``nsqd``: ``"host:port"`` of the nsqd that delivered it;
* ``dead_lettered_at``: when the consumer gave up, ns since the epoch;
* ``error``: the handler's last error, ``{"type", "message"}``, or ``null``
  when this consumer did not see it (another process handled the earlier
  attempt, or the handler requeued without raising); for a message the
  consumer's ``max_age`` expired, ``{"type": "MessageExpired", "message":
  "<age> s old, above max_age=<max_age> s"}``;
* ``body``: the original body, base64 (standard alphabet, padded).

:meth:`DeadLetter.encode` and :func:`decode_envelope` are pure; a bad
envelope raises :class:`~gnsqlite.errors.EnvelopeError` saying what is wrong.
:class:`DeadLetterPublisher` is the publishing side the Consumer owns.
"""

from __future__ import annotations

import base64
import binascii
import collections
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .config import ConnectionConfig, ConsumerConfig
from .errors import ConfigError, ConnectionClosedError, EnvelopeError
from .message import Message
from .producer import Producer

__all__ = [
    "ENVELOPE_FORMAT",
    "DeadLetter",
    "DeadLetterPublisher",
    "HandlerError",
    "decode_envelope",
]

log = logging.getLogger(__name__)

#: The ``format`` field of every envelope this version writes and reads.
ENVELOPE_FORMAT = "gnsqlite.dead-letter/1"
#: How many handler errors are remembered at once (messages on their last attempt).
_MAX_REMEMBERED = 10_000
_FIELDS: dict[str, type] = {
    "topic": str,
    "channel": str,
    "id": str,
    "attempts": int,
    "timestamp": int,
    "nsqd": str,
    "dead_lettered_at": int,
    "body": str,
}


@dataclass(frozen=True)
class HandlerError:
    """The handler's exception, as text: its class name and its message."""

    type: str
    message: str

    @classmethod
    def of(cls, exc: BaseException) -> HandlerError:
        """Describe ``exc`` (``"ValueError"``, ``str(exc)``)."""
        return cls(type(exc).__name__, str(exc))


@dataclass(frozen=True)
class DeadLetter:
    """One given-up message and where it came from; see the module docstring.

    ``timestamp`` and ``dead_lettered_at`` are nanoseconds since the epoch.
    """

    topic: str
    channel: str
    id: str
    attempts: int
    timestamp: int
    nsqd: str
    dead_lettered_at: int
    error: HandlerError | None
    body: bytes

    @classmethod
    def of(
        cls, message: Message, topic: str, channel: str, error: HandlerError | None = None
    ) -> DeadLetter:
        """The dead letter of ``message`` consumed from ``topic``/``channel``, given up now."""
        return cls(
            topic=topic,
            channel=channel,
            id=message.id,
            attempts=message.attempts,
            timestamp=message.timestamp,
            nsqd=message.nsqd,
            dead_lettered_at=time.time_ns(),
            error=error,
            body=message.body,
        )

    def to_json(self) -> dict[str, Any]:
        """The envelope as a JSON-ready dict (``body`` in base64)."""
        error = self.error
        return {
            "format": ENVELOPE_FORMAT,
            "topic": self.topic,
            "channel": self.channel,
            "id": self.id,
            "attempts": self.attempts,
            "timestamp": self.timestamp,
            "nsqd": self.nsqd,
            "dead_lettered_at": self.dead_lettered_at,
            "error": None if error is None else {"type": error.type, "message": error.message},
            "body": base64.b64encode(self.body).decode("ascii"),
        }

    def encode(self) -> bytes:
        """The envelope as compact UTF-8 JSON bytes (the dead letter's body)."""
        return json.dumps(self.to_json(), separators=(",", ":"), ensure_ascii=False).encode()


def decode_envelope(data: bytes | str) -> DeadLetter:
    """Read an envelope written by :meth:`DeadLetter.encode`.

    Raises :class:`~gnsqlite.errors.EnvelopeError` naming the problem when
    ``data`` is not JSON, not an object, has another ``format``, lacks a
    field, has a field of the wrong type, or a ``body`` that is not base64.
    Unknown extra fields are ignored (a later version may add some).
    """
    try:
        record = json.loads(data)
    except (ValueError, TypeError) as exc:  # JSONDecodeError and bad UTF-8 are ValueErrors
        raise EnvelopeError(f"not a dead-letter envelope: not JSON ({exc})") from None
    if not isinstance(record, dict):
        raise EnvelopeError(
            f"not a dead-letter envelope: a JSON {type(record).__name__}, not an object"
        )
    tag = record.get("format")
    if tag != ENVELOPE_FORMAT:
        raise EnvelopeError(
            f"not a dead-letter envelope: format {tag!r}, expected {ENVELOPE_FORMAT!r}"
        )
    for name, kind in _FIELDS.items():
        if name not in record:
            raise EnvelopeError(f"dead-letter envelope without {name!r}")
        value = record[name]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise EnvelopeError(
                f"dead-letter envelope field {name!r} must be {kind.__name__},"
                f" not {type(value).__name__}"
            )
    try:
        body = base64.b64decode(record["body"], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise EnvelopeError(f"dead-letter envelope 'body' is not base64: {exc}") from None
    return DeadLetter(
        topic=record["topic"],
        channel=record["channel"],
        id=record["id"],
        attempts=record["attempts"],
        timestamp=record["timestamp"],
        nsqd=record["nsqd"],
        dead_lettered_at=record["dead_lettered_at"],
        error=_decode_error(record.get("error")),
        body=body,
    )


def _decode_error(value: object) -> HandlerError | None:
    if value is None:
        return None
    if (
        not isinstance(value, Mapping)
        or not isinstance(value.get("type"), str)
        or not isinstance(value.get("message"), str)
    ):
        raise EnvelopeError(
            "dead-letter envelope field 'error' must be null or an object"
            " with str 'type' and 'message'"
        )
    return HandlerError(value["type"], value["message"])


class DeadLetterPublisher:
    """Publishes a Consumer's given-up messages to its dead-letter topic.

    It owns its :class:`~gnsqlite.producer.Producer`\\ s: one for
    ``dead_letter_nsqd`` or, when that is empty, one per nsqd that delivered
    a message. Each is created and started on first use (the constructor
    opens nothing), reconnects on the consumer's ``reconnect_interval`` and
    ``max_reconnect_interval``, uses its connection options (TLS, auth ...),
    and is closed by :meth:`close`.
    """

    def __init__(
        self,
        topic: str,
        channel: str,
        config: ConsumerConfig,
        connection_config: ConnectionConfig,
    ) -> None:
        if config.dead_letter_topic is None:
            raise ConfigError("DeadLetterPublisher needs a config with dead_letter_topic")
        if config.dead_letter_topic == topic:
            raise ConfigError(
                f"dead_letter_topic={topic!r} is the topic consumed: dead letters would come"
                f" back to this consumer; use another topic, e.g. {topic + '.dead'!r}"
            )
        self.topic = config.dead_letter_topic
        self.source_topic = topic
        self.source_channel = channel
        self.envelope = config.dead_letter_envelope
        self.nsqd = config.dead_letter_nsqd
        self.timeout = config.dead_letter_timeout
        self.reconnect_interval = config.reconnect_interval
        self.max_reconnect_interval = config.max_reconnect_interval
        self._connection_config = connection_config
        self._producers: dict[str, Producer] = {}
        self._errors: collections.OrderedDict[str, HandlerError] = collections.OrderedDict()
        self._closed = False
        #: Messages published to the dead-letter topic, and publishes that failed.
        self.published = 0
        self.failed = 0

    @classmethod
    def for_consumer(
        cls, topic: str, channel: str, config: ConsumerConfig, connection: ConnectionConfig
    ) -> DeadLetterPublisher | None:
        """A publisher when ``config`` names a dead-letter topic, else ``None``."""
        if config.dead_letter_topic is None:
            return None
        return cls(topic, channel, config, connection)

    def __repr__(self) -> str:
        return f"<DeadLetterPublisher {self.source_topic}/{self.source_channel} -> {self.topic}>"

    def handler_failed(self, message: Message, exc: BaseException) -> None:
        """Remember the handler's error for the envelope (the settler calls it on a
        message's last attempt)."""
        if not self.envelope:
            return
        errors = self._errors
        errors[message.id] = HandlerError.of(exc)
        errors.move_to_end(message.id)
        while len(errors) > _MAX_REMEMBERED:
            errors.popitem(last=False)

    def body_of(self, message: Message, error: HandlerError | None = None) -> bytes:
        """What is published for ``message``: its body, or its envelope.

        The envelope's ``error`` is ``error`` when given, else the handler's
        last error remembered for it (:meth:`handler_failed`).
        """
        if not self.envelope:
            return message.body
        if error is None:
            error = self._errors.get(message.id)
        letter = DeadLetter.of(message, self.source_topic, self.source_channel, error)
        return letter.encode()

    def publish(self, message: Message, error: HandlerError | None = None) -> bool:
        """Publish ``message``'s dead letter; blocks up to about ``dead_letter_timeout`` s.

        ``error`` is why, for the envelope (see :meth:`body_of`). The first
        publish to an nsqd also connects, within the same timeout.

        ``True`` once nsqd accepted it; ``False`` (logged) when the publish
        failed, and the caller must requeue the message.
        """
        try:
            self._producer(message.nsqd).publish(
                self.topic, self.body_of(message, error), timeout=self.timeout
            )
        except Exception as exc:
            self.failed += 1
            log.warning("%s: could not dead-letter %s (%s); requeueing it", self, message, exc)
            return False
        self.published += 1
        self._errors.pop(message.id, None)
        log.info("%s: dead-lettered %s", self, message)
        return True

    def _producer(self, delivered_by: str) -> Producer:
        key = "" if self.nsqd else delivered_by
        producer = self._producers.get(key)
        if producer is None:
            if self._closed:
                raise ConnectionClosedError(self.topic, "the dead-letter publisher is closed")
            producer = Producer(
                self.nsqd or delivered_by,
                connection_config=self._connection_config,
                timeout=self.timeout,
                reconnect_interval=self.reconnect_interval,
                max_reconnect_interval=self.max_reconnect_interval,
            )
            self._producers[key] = producer
            # connects in the background (and reconnects); the publish waits for it
            producer.start(timeout=0.0)
        return producer

    def stats(self) -> dict[str, Any]:
        """``topic``, counts ``published`` and ``failed``, and the nsqd connected to."""
        return {
            "topic": self.topic,
            "envelope": self.envelope,
            "published": self.published,
            "failed": self.failed,
            "nsqd": sorted(c.name for p in self._producers.values() for c in p.connections),
        }

    def close(self) -> None:
        """Close every producer (publishes still waiting fail). Safe to call twice."""
        self._closed = True
        producers = list(self._producers.values())
        self._producers.clear()
        for producer in producers:
            producer.close()
