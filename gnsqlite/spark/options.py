"""The options of the ``nsq`` Spark format: names, defaults, units, validation.

Pure: no Spark, no gevent. Spark lower-cases option keys, so every name is
matched case-insensitively, and underscores are ignored (``maxInFlight``,
``maxinflight`` and ``max_in_flight`` are one option). Connection options
(``heartbeatInterval``, ``tlsV1``, ``snappy``, ``authSecret`` ...) are the
fields of :class:`~gnsqlite.config.ConnectionConfig` and are validated by
:meth:`~gnsqlite.config.ConnectionConfig.from_mapping`.

An unknown option, an option of the other side (``channel`` on a write), a
missing required option or a bad value raises
:class:`~gnsqlite.errors.ConfigError` naming the option: Spark reports it
when the query starts. :func:`describe_options` lists every option with its
default and unit (the table in examples/spark_pipeline/README.md, shown on the
documentation site's Spark page, is generated from it).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..config import ConnectionConfig, ConsumerConfig
from ..errors import ConfigError
from ..net import normalize_addresses
from ..options import Option, Validated, option, options_of
from ..protocol import check_channel_name, check_topic_name, defaults

__all__ = [
    "OPTIONS",
    "READ_ON",
    "FormatOptions",
    "SinkOptions",
    "SourceOptions",
    "describe_options",
    "parse_sink_options",
    "parse_source_options",
    "split_options",
]

SOURCE = "source"
SINK = "sink"
BOTH = "both"

#: Keys Spark itself puts in a data source's options; accepted and ignored.
SPARK_KEYS = frozenset({"path", "checkpointlocation", "queryname"})


@dataclass(frozen=True, kw_only=True)
class FormatOptions(Validated):
    """The connector's own options, each declared once with the one option mechanism.

    ``key`` is the option's Spark spelling (matched case-insensitively,
    underscores ignored), ``scope`` the side that takes it (``"source"``,
    ``"sink"`` or ``"both"``), ``lo`` its lower bound and ``doc`` its meaning
    (:func:`describe_options`). The values themselves are read by
    :func:`parse_source_options` and :func:`parse_sink_options`.
    """

    topic: str | None = option(
        None,
        str,
        nullable=True,
        key="topic",
        scope=BOTH,
        doc="Topic to read (required for reading); default topic of rows without a `topic`"
        " column value when writing",
    )
    nsqd_tcp_addresses: str = option(
        "",
        str,
        key="nsqdTcpAddresses",
        scope=BOTH,
        doc="Comma-separated nsqd TCP addresses `host:4150` (writing: required)",
    )
    lookupd_http_addresses: str = option(
        "",
        str,
        key="lookupdHttpAddresses",
        scope=SOURCE,
        doc="Comma-separated nsqlookupd HTTP addresses `host:4161`; reading needs these or"
        " nsqdTcpAddresses",
    )
    channel: str | None = option(
        None,
        str,
        nullable=True,
        key="channel",
        scope=SOURCE,
        doc="Channel to read from (required)",
    )
    max_messages_per_batch: int = option(
        10000,
        int,
        lo=1,
        unit="messages",
        key="maxMessagesPerBatch",
        scope=SOURCE,
        doc="Most messages in one micro-batch (Spark's default read limit)",
    )
    max_in_flight: int = option(
        0,
        int,
        lo=0,
        unit="messages",
        key="maxInFlight",
        scope=SOURCE,
        doc="RDY budget over all nsqd: messages held unfinished by the source; 0 means 5000"
        " with walLocation (two connections of nsqd's default --max-rdy-count 2500, so nsqd"
        " keeps sending while a segment is written), else two batches"
        " (2 x maxMessagesPerBatch)",
    )
    connections_per_nsqd: int = option(
        0,
        int,
        lo=0,
        key="connectionsPerNsqd",
        scope=SOURCE,
        doc="Connections to each nsqd, each a client of the channel with its own share of"
        " maxInFlight (nsqd caps one connection's RDY at --max-rdy-count); 0 means"
        " ceil(maxInFlight / 2500), so the budget is not capped by nsqd's default",
    )
    wal_location: str = option(
        "",
        str,
        key="walLocation",
        scope=SOURCE,
        doc="Directory or URI (hdfs://, s3:// ... through pyarrow.fs) of the source's write-ahead"
        " log, one per query; every executor must be able to read it. Set: exactly-once with"
        " an idempotent sink. Unset: messages are held unfinished at nsqd until Spark commits,"
        " at-least-once",
    )
    read_on: str = option(
        "driver",
        str,
        key="readOn",
        scope=SOURCE,
        doc="Where messages are consumed: `driver` (one process beside the driver, the default) or"
        " `executors` (each task of a batch subscribes and takes its share itself; needs"
        " walLocation, and nsqdHttpAddresses with nsqdTcpAddresses)",
    )
    nsqd_http_addresses: str = option(
        "",
        str,
        key="nsqdHttpAddresses",
        scope=SOURCE,
        doc="readOn=executors with nsqdTcpAddresses: the HTTP addresses `host:4151` of the same"
        " nsqd, in the same order (the driver plans from their /stats)",
    )
    read_timeout: float = option(
        10.0,
        float,
        lo=0.1,
        unit="s",
        key="readTimeout",
        scope=SOURCE,
        doc="readOn=executors: a task takes its share within this long at most",
    )
    read_idle_timeout: float = option(
        0.5,
        float,
        lo=0.01,
        unit="s",
        key="readIdleTimeout",
        scope=SOURCE,
        doc="readOn=executors: a task ends its read once no message arrived for this long",
    )
    wal_max_bytes: int = option(
        1 << 30,
        int,
        lo=1,
        unit="bytes",
        key="walMaxBytes",
        scope=SOURCE,
        doc="Uncommitted WAL above this: the source stops taking messages (RDY 0) until Spark"
        " commits",
    )
    wal_segment_messages: int = option(
        0,
        int,
        lo=0,
        unit="messages",
        key="walSegmentMessages",
        scope=SOURCE,
        doc="Messages per WAL segment at most; 0 means half of maxInFlight, so the next segment"
        " arrives while one is written",
    )
    wal_flush_interval: float = option(
        0.05,
        float,
        lo=0.001,
        unit="s",
        key="walFlushInterval",
        scope=SOURCE,
        doc="A WAL segment is written at the latest this long after its first message arrived",
    )
    wal_batch_delay: float = option(
        2.0,
        float,
        lo=0.0,
        unit="s",
        key="walBatchDelay",
        scope=SOURCE,
        doc="While a backlog drains (with walLocation: messages arrive faster than half of"
        " walSegmentMessages per walFlushInterval; without: at least 25,000 per second), a"
        " micro-batch waits up to this long after its oldest segment was written (without"
        " walLocation: its oldest message arrived) to fill up to maxMessagesPerBatch, or"
        " without walLocation to what maxInFlight lets in (fewer, larger batches); slower"
        " streams are planned at once; 0 never waits",
    )
    num_partitions: int = option(
        2,
        int,
        lo=1,
        key="numPartitions",
        scope=SOURCE,
        doc="Spark partitions per micro-batch",
    )
    max_attempts: int = option(
        0,
        int,
        lo=0,
        key="maxAttempts",
        scope=SOURCE,
        doc="Finish (drop, with a WARNING, or publish to deadLetterTopic) messages delivered"
        " more often than this; 0 never drops",
    )
    available_now_idle_timeout: float = option(
        2.0,
        float,
        lo=0.01,
        unit="s",
        key="availableNowIdleTimeout",
        scope=SOURCE,
        doc="Trigger.AvailableNow ends once no message arrived for this long",
    )
    start_timeout: float = option(
        30.0,
        float,
        lo=0.1,
        unit="s",
        key="startTimeout",
        scope=SOURCE,
        doc="How long the source waits for its first nsqd connection before failing",
    )
    stop_timeout: float = option(
        5.0,
        float,
        lo=0.0,
        unit="s",
        key="stopTimeout",
        scope=SOURCE,
        doc="How long stopping the source waits for nsqd to take back unfinished messages",
    )
    max_messages_per_publish: int = option(
        1000,
        int,
        lo=1,
        unit="messages",
        key="maxMessagesPerPublish",
        scope=SINK,
        doc="Most messages in one MPUB (also bounded by maxBodySize)",
    )
    max_body_size: int = option(
        defaults.MAX_BODY_SIZE,
        int,
        lo=1024,
        unit="bytes",
        key="maxBodySize",
        scope=SINK,
        doc="nsqd's --max-body-size: an MPUB body never exceeds it",
    )
    max_message_size: int = option(
        defaults.MAX_MSG_SIZE,
        int,
        lo=1,
        unit="bytes",
        key="maxMessageSize",
        scope=SINK,
        doc="nsqd's --max-msg-size: a larger row fails the task",
    )
    max_pending_publishes: int = option(
        4,
        int,
        lo=1,
        key="maxPendingPublishes",
        scope=SINK,
        doc="MPUBs a task keeps waiting for their OK at once",
    )
    publish_timeout: float = option(
        30.0,
        float,
        lo=0.1,
        unit="s",
        key="publishTimeout",
        scope=SINK,
        doc="How long one publish may wait for nsqd's OK, retries included",
    )


#: The connector's own options, in declaration order (see :class:`FormatOptions`).
OPTIONS: tuple[Option, ...] = options_of(FormatOptions)


def _key(spec: Option) -> str:
    """An option's Spark key (every :class:`FormatOptions` option declares one)."""
    return spec.key or spec.name


_SPECS = {_key(spec).lower(): spec for spec in OPTIONS}
_CONSUMER_PASSTHROUGH = (
    "lookupd_poll_interval",
    "lookupd_poll_jitter",
    "lookupd_request_timeout",
    "low_rdy_idle_timeout",
    "low_rdy_timeout",
    "rdy_redistribute_interval",
    "reconnect_interval",
    "max_reconnect_interval",
    "dead_letter_topic",
    "dead_letter_envelope",
    "dead_letter_nsqd",
    "dead_letter_timeout",
)
_CONNECTION_FIELDS = tuple(n for n in ConnectionConfig.option_names() if n != "tls_context")


def _norm(key: str) -> str:
    return key.replace("_", "").replace("-", "").lower()


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part.capitalize() for part in rest)


_BY_NORM: dict[str, tuple[str, str]] = {}  # normalized key -> (kind, canonical name)
for _s in OPTIONS:
    _BY_NORM[_norm(_key(_s))] = ("own", _key(_s))
for _f in _CONNECTION_FIELDS:
    _BY_NORM[_norm(_f)] = ("connection", _f)
for _f in _CONSUMER_PASSTHROUGH:
    _BY_NORM[_norm(_f)] = ("consumer", _f)


def split_options(
    options: Mapping[str, str], side: str | None
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Split raw options into (own, connection, consumer) dicts keyed by canonical name.

    Raises :class:`ConfigError` for an unknown key (suggesting the closest
    name) or, with a ``side`` (``"source"``/``"sink"``), a key of the other
    side. Without a side, only unknown keys fail.
    """
    own: dict[str, Any] = {}
    connection: dict[str, Any] = {}
    consumer: dict[str, Any] = {}
    for key, value in options.items():
        if key.lower() in SPARK_KEYS:
            continue
        found = _BY_NORM.get(_norm(key))
        if found is None:
            names = [_key(s) for s in OPTIONS] + [_camel(f) for f in _CONNECTION_FIELDS]
            if side != SINK:
                names += [_camel(f) for f in _CONSUMER_PASSTHROUGH]
            close = difflib.get_close_matches(key, names, n=1, cutoff=0.5)
            if not close:
                lowered = {n.lower(): n for n in names}
                hits = difflib.get_close_matches(key.lower(), lowered, n=1, cutoff=0.5)
                close = [lowered[h] for h in hits]
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown option {key!r} for the nsq {side or 'format'}{hint}")
        kind, name = found
        if kind == "own":
            spec = _SPECS[name.lower()]
            if side is not None and spec.scope not in (side, BOTH):
                verb = "reading" if spec.scope == SOURCE else "writing"
                raise ConfigError(f"option {key!r} is for {verb} only; remove it from this {side}")
            own[name] = value
        elif kind == "connection":
            connection[name] = value
        else:
            if side == SINK:
                raise ConfigError(f"option {key!r} is for reading only; remove it from this sink")
            consumer[name] = value
    return own, connection, consumer


def _value(spec: Option, raw: Any) -> Any:
    """The value of one of the connector's options, named by its Spark key in errors."""
    if raw is None:
        return spec.default
    kind = spec.kinds[0]
    if kind is str:
        return str(raw).strip()
    try:
        value = kind(str(raw).strip()) if isinstance(raw, str) else kind(raw)
    except (TypeError, ValueError):
        raise ConfigError(
            f"option {_key(spec)}={raw!r} is not {'an int' if kind is int else 'a number'}"
            f"{' of ' + spec.unit if spec.unit else ''}"
        ) from None
    if isinstance(raw, bool) or value != value or (spec.lo is not None and value < spec.lo):
        unit = f" {spec.unit}" if spec.unit else ""
        raise ConfigError(
            f"option {_key(spec)}={raw!r} is out of range: use {spec.lo}{unit} or more"
        )
    return value


def _resolve(own: Mapping[str, Any], side: str) -> dict[str, Any]:
    return {
        _key(spec): _value(spec, own.get(_key(spec)))
        for spec in OPTIONS
        if spec.scope in (side, BOTH)
    }


def _addresses(name: str, text: str) -> tuple[str, ...]:
    items = [item.strip() for item in text.split(",")]
    for item in items:
        if "://" in item:  # "http://host:4161" would parse as host "http://host"
            raise ConfigError(f"option {name}: give host:port without a scheme, not {item!r}")
    return normalize_addresses(f"option {name}", [item for item in items if item])


def _connection(values: Mapping[str, Any]) -> ConnectionConfig:
    try:
        return ConnectionConfig.from_mapping(values)
    except ConfigError as exc:
        raise ConfigError(f"connection option: {exc}") from None


@dataclass(frozen=True)
class SourceOptions:
    """The validated options of the streaming source (their defaults: :data:`OPTIONS`)."""

    topic: str
    channel: str
    nsqd_tcp_addresses: tuple[str, ...]
    lookupd_http_addresses: tuple[str, ...]
    max_messages_per_batch: int
    max_in_flight: int
    num_partitions: int
    max_attempts: int
    available_now_idle_timeout: float
    start_timeout: float
    stop_timeout: float
    connection: ConnectionConfig
    consumer: dict[str, Any]
    connections_per_nsqd: int
    wal_location: str | None
    wal_max_bytes: int
    wal_segment_messages: int
    wal_flush_interval: float
    wal_batch_delay: float
    read_on: str
    nsqd_http_addresses: tuple[str, ...]
    read_timeout: float
    read_idle_timeout: float


#: The values of option ``readOn``.
READ_ON = ("driver", "executors")


@dataclass(frozen=True)
class SinkOptions:
    """The validated options of the batch and streaming sink (see :data:`OPTIONS`)."""

    topic: str | None
    nsqd_tcp_addresses: tuple[str, ...]
    max_messages_per_publish: int
    max_body_size: int
    max_message_size: int
    max_pending_publishes: int
    publish_timeout: float
    connection: ConnectionConfig


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    """Validate the options of ``spark.readStream.format("nsq")``; raises ``ConfigError``."""
    own, conn, consumer = split_options(options, SOURCE)
    v = _resolve(own, SOURCE)
    if not v["topic"]:
        raise ConfigError("option 'topic' is required: .option('topic', 'name')")
    if not v["channel"]:
        raise ConfigError("option 'channel' is required for reading: .option('channel', 'name')")
    try:
        topic = check_topic_name(v["topic"])
        channel = check_channel_name(v["channel"])
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError(f"option topic/channel: {exc}") from None
    nsqd = _addresses("nsqdTcpAddresses", v["nsqdTcpAddresses"])
    lookupd = _addresses("lookupdHttpAddresses", v["lookupdHttpAddresses"])
    if not nsqd and not lookupd:
        raise ConfigError(
            "give option 'lookupdHttpAddresses' (host:4161,...) or 'nsqdTcpAddresses'"
            " (host:4150,...)"
        )
    try:
        # with maxAttempts, so rules across both (a dead-letter topic needs it) are checked
        checked = ConsumerConfig.from_mapping({**consumer, "max_attempts": v["maxAttempts"]})
    except ValueError as exc:  # ConfigError, InvalidNameError (deadLetterTopic)
        raise ConfigError(f"consumer option: {exc}") from None
    if checked.dead_letter_topic == topic:
        raise ConfigError(
            f"option deadLetterTopic={topic!r} is the topic read: use another, e.g. {topic}.dead"
        )
    per_batch = v["maxMessagesPerBatch"]
    wal = v["walLocation"] or None
    if wal is not None:
        max_in_flight = v["maxInFlight"] or 2 * defaults.MAX_RDY_COUNT
    else:
        max_in_flight = v["maxInFlight"] or 2 * per_batch
    connections = v["connectionsPerNsqd"] or -(-max_in_flight // defaults.MAX_RDY_COUNT)
    read_on = v["readOn"].lower()
    nsqd_http = _addresses("nsqdHttpAddresses", v["nsqdHttpAddresses"])
    if read_on not in READ_ON:
        raise ConfigError(f"option readOn={v['readOn']!r}: use one of {', '.join(READ_ON)}")
    if read_on == "executors":
        if wal is None:
            raise ConfigError(
                "option readOn=executors needs walLocation: storage every executor can reach"
                " (a local path on one machine, hdfs://, s3:// ...)"
            )
        if nsqd and len(nsqd_http) != len(nsqd):
            raise ConfigError(
                "option readOn=executors with nsqdTcpAddresses needs nsqdHttpAddresses: the"
                f" HTTP address (host:4151) of each of the {len(nsqd)} nsqd, in the same order"
            )
        if checked.dead_letter_topic is not None:
            raise ConfigError(
                "option deadLetterTopic is for readOn=driver: with readOn=executors a message"
                " past maxAttempts is finished without a row (logged); drop deadLetterTopic"
                " or read with readOn=driver"
            )
    return SourceOptions(
        topic=topic,
        channel=channel,
        nsqd_tcp_addresses=nsqd,
        lookupd_http_addresses=lookupd,
        max_messages_per_batch=per_batch,
        max_in_flight=max_in_flight,
        num_partitions=v["numPartitions"],
        max_attempts=v["maxAttempts"],
        available_now_idle_timeout=v["availableNowIdleTimeout"],
        start_timeout=v["startTimeout"],
        stop_timeout=v["stopTimeout"],
        connection=_connection(conn),
        consumer={name: getattr(checked, name) for name in consumer},
        connections_per_nsqd=min(connections, max_in_flight),
        wal_location=wal,
        wal_max_bytes=v["walMaxBytes"],
        wal_segment_messages=v["walSegmentMessages"] or -(-max_in_flight // 2),
        wal_flush_interval=v["walFlushInterval"],
        wal_batch_delay=v["walBatchDelay"],
        read_on=read_on,
        nsqd_http_addresses=nsqd_http,
        read_timeout=v["readTimeout"],
        read_idle_timeout=v["readIdleTimeout"],
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate the options of ``df.write.format("nsq")``; raises ``ConfigError``."""
    own, conn, _ = split_options(options, SINK)
    v = _resolve(own, SINK)
    topic = v["topic"] or None
    if topic is not None:
        try:
            topic = check_topic_name(topic)
        except ValueError as exc:
            raise ConfigError(f"option topic: {exc}") from None
    nsqd = _addresses("nsqdTcpAddresses", v["nsqdTcpAddresses"])
    if not nsqd:
        raise ConfigError("option 'nsqdTcpAddresses' is required for writing: 'host:4150,...'")
    if "maxMessageSize" not in own:  # the default follows a lowered maxBodySize
        v["maxMessageSize"] = min(v["maxMessageSize"], v["maxBodySize"] - 8)
    if v["maxMessageSize"] > v["maxBodySize"] - 8:
        raise ConfigError(
            f"option maxMessageSize={v['maxMessageSize']} is above"
            f" maxBodySize={v['maxBodySize']} minus 8 bytes of MPUB framing: lower it"
        )
    return SinkOptions(
        topic=topic,
        nsqd_tcp_addresses=nsqd,
        max_messages_per_publish=v["maxMessagesPerPublish"],
        max_body_size=v["maxBodySize"],
        max_message_size=v["maxMessageSize"],
        max_pending_publishes=v["maxPendingPublishes"],
        publish_timeout=v["publishTimeout"],
        connection=_connection(conn),
    )


def describe_options() -> str:
    """A Markdown table of the connector's own options: name, side, default, unit, meaning."""
    lines = ["| option | used by | default | unit | meaning |", "|---|---|---|---|---|"]
    for s in OPTIONS:
        default = "(none)" if s.default in (None, "") else str(s.default)
        side = {"both": "read, write", "source": "read", "sink": "write"}[s.scope or BOTH]
        lines.append(f"| `{_key(s)}` | {side} | {default} | {s.unit} | {s.doc} |")
    return "\n".join(lines)
