"""The catalogue of gnsqlite's Prometheus metrics: names, kinds, help texts, labels, buckets.

Plain data (:class:`MetricSpec` values and :data:`METRICS`), importable
without ``prometheus_client``; :mod:`gnsqlite.metrics` exports them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HANDLER_BUCKETS", "METRICS", "PUBLISH_BUCKETS", "MetricSpec"]

#: Bucket bounds of ``gnsqlite_consumer_handler_seconds``, in seconds.
HANDLER_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
#: Bucket bounds of ``gnsqlite_producer_publish_seconds``, in seconds.
PUBLISH_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


@dataclass(frozen=True)
class MetricSpec:
    """One metric: its name (a counter's without ``_total``), kind, help and labels.

    ``merge`` says how two clients with the same label values combine
    (``"sum"`` or ``"max"``); ``multiprocess_mode`` is the gauge mode used in
    prometheus_client's multiprocess mode.
    """

    name: str
    kind: str  # "counter", "gauge" or "histogram"
    help: str
    labels: tuple[str, ...]
    merge: str = "sum"
    multiprocess_mode: str = "livesum"
    buckets: tuple[float, ...] = ()


_CONSUMER = ("topic", "channel", "nsqd")
_CHANNEL = ("topic", "channel")

RECEIVED = MetricSpec(
    "gnsqlite_consumer_messages_received",
    "counter",
    "Messages received from nsqd.",
    _CONSUMER,
)
FINISHED = MetricSpec(
    "gnsqlite_consumer_messages_finished",
    "counter",
    "Messages finished (FIN), given-up ones included.",
    _CONSUMER,
)
REQUEUED = MetricSpec(
    "gnsqlite_consumer_messages_requeued",
    "counter",
    "Messages requeued (REQ): handler failures, explicit requeues, and on close.",
    _CONSUMER,
)
GIVEN_UP = MetricSpec(
    "gnsqlite_consumer_messages_given_up",
    "counter",
    "Messages past max_attempts given up (dead-lettered, handed to on_giving_up) and finished.",
    _CONSUMER,
)
EXPIRED = MetricSpec(
    "gnsqlite_consumer_messages_expired",
    "counter",
    "Messages older than max_age (by nsqd's timestamp) not handled: dead-lettered when a"
    " dead_letter_topic is set, and finished.",
    _CONSUMER,
)
TOUCHES = MetricSpec(
    "gnsqlite_consumer_touches",
    "counter",
    "TOUCH commands the consumer sent to extend the lease of a message a handler (or a"
    " batch handler's batcher) held, up to max_lease.",
    _CONSUMER,
)
DEAD_LETTERS = MetricSpec(
    "gnsqlite_consumer_dead_letters",
    "counter",
    "Dead-letter publishes of messages given up, by outcome: published (then finished), or"
    " failed (the message was requeued and is dead-lettered on a later delivery).",
    ("topic", "channel", "dead_letter_topic", "outcome"),
)
ENVELOPES = MetricSpec(
    "gnsqlite_consumer_envelopes",
    "counter",
    "Bodies a traced consumer (gnsqlite.tracing, envelope on) looked at, by outcome: opened (a"
    " trace envelope, taken out), plain (none: handed over untouched), invalid (the envelope's"
    " magic but not parseable: handed over unchanged).",
    ("topic", "channel", "outcome"),
)
IN_FLIGHT = MetricSpec(
    "gnsqlite_consumer_in_flight",
    "gauge",
    "Messages received and not yet answered, per connection.",
    _CONSUMER,
)
RDY = MetricSpec(
    "gnsqlite_consumer_rdy", "gauge", "The RDY count last sent, per connection.", _CONSUMER
)
BACKOFF_LEVEL = MetricSpec(
    "gnsqlite_consumer_backoff_level",
    "gauge",
    "The consumer's backoff level (0: no backoff).",
    _CHANNEL,
    "max",
    "livemax",
)
STARVED = MetricSpec(
    "gnsqlite_consumer_starved",
    "gauge",
    "1 while a connection's in-flight count is at 85% of its RDY or more, else 0.",
    _CHANNEL,
    "max",
    "livemax",
)
HANDLER_SECONDS = MetricSpec(
    "gnsqlite_consumer_handler_seconds",
    "histogram",
    "Seconds each handler call ran (each batch call with a batch_handler).",
    _CHANNEL,
    buckets=HANDLER_BUCKETS,
)
PUBLISHES = MetricSpec(
    "gnsqlite_producer_publishes",
    "counter",
    "Publish commands nsqd answered OK.",
    ("topic", "command"),
)
MESSAGES = MetricSpec(
    "gnsqlite_producer_messages",
    "counter",
    "Messages in the publish commands nsqd answered OK.",
    ("topic", "command"),
)
PUBLISH_ERRORS = MetricSpec(
    "gnsqlite_producer_publish_errors",
    "counter",
    "Failed publishes, by nsqd's E_* code or no_connections, timeout, closed, connection.",
    ("code",),
)
PUBLISH_IN_FLIGHT = MetricSpec(
    "gnsqlite_producer_in_flight",
    "gauge",
    "Publishes waiting for nsqd's answer or for a connection.",
    (),
)
PUBLISH_SECONDS = MetricSpec(
    "gnsqlite_producer_publish_seconds",
    "histogram",
    "Seconds from a publish call to nsqd's answer or the failure, retries included.",
    ("topic", "command"),
    buckets=PUBLISH_BUCKETS,
)
LOOKUPD_POLLS = MetricSpec(
    "gnsqlite_producer_lookupd_polls",
    "counter",
    "Lookupd polls of a producer given lookupd_http_addresses, by outcome: answered, or"
    " failed (every lookupd failed; the nsqd found before are kept).",
    ("outcome",),
)
NSQD_CHANGES = MetricSpec(
    "gnsqlite_producer_nsqd_changes",
    "counter",
    "nsqd that joined (change=added) or left (change=removed) a producer's pool as lookupd"
    " listed them.",
    ("change",),
)
NSQD_DISCOVERED = MetricSpec(
    "gnsqlite_producer_nsqd_discovered",
    "gauge",
    "nsqd a producer found through lookupd and publishes to now (static ones not counted).",
    (),
)
CONNECTIONS = MetricSpec(
    "gnsqlite_connections",
    "gauge",
    "Connections by role (consumer, producer), nsqd and state (connected, disconnected).",
    ("role", "nsqd", "state"),
)

#: Every metric, by name.
METRICS: dict[str, MetricSpec] = {
    spec.name: spec
    for spec in (
        RECEIVED,
        FINISHED,
        REQUEUED,
        GIVEN_UP,
        EXPIRED,
        TOUCHES,
        DEAD_LETTERS,
        ENVELOPES,
        IN_FLIGHT,
        RDY,
        BACKOFF_LEVEL,
        STARVED,
        HANDLER_SECONDS,
        PUBLISHES,
        MESSAGES,
        PUBLISH_ERRORS,
        PUBLISH_IN_FLIGHT,
        PUBLISH_SECONDS,
        LOOKUPD_POLLS,
        NSQD_CHANGES,
        NSQD_DISCOVERED,
        CONNECTIONS,
    )
}
#: The specs of the consumer's cumulative counters, in the order of
#: :data:`gnsqlite.consumer.COUNTERS` (received, finished, requeued, given up,
#: expired, touches).
COUNTER_SPECS = (RECEIVED, FINISHED, REQUEUED, GIVEN_UP, EXPIRED, TOUCHES)
