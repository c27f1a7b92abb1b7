"""Validated, immutable configuration with the option names NSQ users know.

:class:`ConnectionConfig` holds what a connection negotiates with nsqd
(``heartbeat_interval``, ``snappy``, ``msg_timeout`` ...);
:class:`ConsumerConfig` holds what drives a consumer (``max_in_flight``,
``max_attempts``, ``requeue_delay`` ...), :class:`ProducerConfig` what drives a
producer (``timeout``, size limits, reconnects). Each validates every field, and the
rules across fields, when built: a bad value raises
:class:`~gnsqlite.errors.ConfigError` naming the option, the value and the
allowed range.

Durations are float seconds everywhere in this module; they become
milliseconds only in :meth:`ConnectionConfig.identify_body`, for the wire.
``None`` turns a feature off where nsqd allows that (nsqd's ``-1``).

Every class can be built from a mapping of strings, for the command line and
the Spark connector: ``ConnectionConfig.from_mapping({"snappy": "true"})``.
The mechanism (:func:`~gnsqlite.options.option`, :class:`~gnsqlite.options.Validated`)
is :mod:`gnsqlite.options`, shared with the broker's, the batch's, Spark's and
the drop-in's options.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ._version import __version__
from .errors import ConfigError, InvalidNameError
from .net import normalize_addresses
from .options import Validated, option, unknown_option
from .protocol import defaults
from .protocol.commands import to_milliseconds
from .protocol.names import check_topic_name

__all__ = [
    "ConnectionConfig",
    "ConsumerConfig",
    "ProducerConfig",
    "DEFAULT_USER_AGENT",
    "split_options",
]

DEFAULT_USER_AGENT = f"gnsqlite/{__version__}"


def split_options(
    options: Mapping[str, Any], classes: Sequence[type[Validated]], owner: str
) -> list[dict[str, Any]]:
    """Sort keyword ``options`` by the config class that declares each, in ``classes`` order.

    An option none of them declares raises :class:`ConfigError` naming it,
    ``owner`` (``"Consumer"``) and the closest option.
    """
    names = [cls.option_names() for cls in classes]
    out: list[dict[str, Any]] = [{} for _ in classes]
    for key in sorted(options):
        for i, declared in enumerate(names):
            if key in declared:
                out[i][key] = options[key]
                break
        else:
            raise unknown_option(key, [n for group in names for n in group], owner)
    return out


@dataclass(frozen=True, kw_only=True)
class ConnectionConfig(Validated):
    """What a connection tells nsqd in IDENTIFY, and how it connects.

    Durations are seconds. ``heartbeat_interval``, ``output_buffer_size`` and
    ``output_buffer_timeout`` accept ``None`` to disable the feature.
    ``tls_context`` (an ``ssl.SSLContext``) overrides ``tls_ca_file``,
    ``tls_cert_file``, ``tls_key_file`` and ``tls_verify``. ``keyword`` is
    the option's pynsq keyword (the drop-in, :mod:`gnsqlite.nsq.options`).
    """

    client_id: str | None = option(None, str, nullable=True)
    hostname: str | None = option(None, str, nullable=True, keyword="hostname")
    heartbeat_interval: float | None = option(
        defaults.HEARTBEAT_INTERVAL,
        float,
        lo=1.0,
        nullable=True,
        unit="s",
        keyword="heartbeat_interval",
    )
    output_buffer_size: int | None = option(
        defaults.OUTPUT_BUFFER_SIZE,
        int,
        lo=64,
        nullable=True,
        unit="bytes",
        keyword="output_buffer_size",
    )
    output_buffer_timeout: float | None = option(
        defaults.OUTPUT_BUFFER_TIMEOUT,
        float,
        lo=0.001,
        nullable=True,
        unit="s",
        keyword="output_buffer_timeout",
    )
    tls_v1: bool = option(False, bool, keyword="tls_v1")
    tls_verify: bool = option(True, bool)
    tls_ca_file: str | None = option(None, str, nullable=True)
    tls_cert_file: str | None = option(None, str, nullable=True)
    tls_key_file: str | None = option(None, str, nullable=True)
    tls_context: Any = option(None, object, nullable=True, secret=True, keyword="tls_options")
    snappy: bool = option(False, bool, keyword="snappy")
    deflate: bool = option(False, bool, keyword="deflate")
    deflate_level: int = option(6, int, lo=1, hi=9, keyword="deflate_level")
    sample_rate: int = option(0, int, lo=0, hi=99, unit="%", keyword="sample_rate")
    user_agent: str = option(DEFAULT_USER_AGENT, str, keyword="user_agent")
    msg_timeout: float | None = option(
        None, float, lo=1.0, nullable=True, unit="s", keyword="msg_timeout"
    )
    auth_secret: str | bytes | None = option(
        None, (str, bytes), nullable=True, secret=True, keyword="auth_secret"
    )
    connect_timeout: float = option(5.0, float, lo=0.001, unit="s", keyword="timeout")
    close_timeout: float = option(5.0, float, lo=0.0, unit="s")
    max_frame_size: int = option(defaults.MAX_FRAME_SIZE, int, lo=1024, unit="bytes")

    def _check_rules(self) -> None:
        if self.snappy and self.deflate:
            raise ConfigError("snappy=True and deflate=True cannot be used together: choose one")
        if self.tls_cert_file is not None and self.tls_key_file is None:
            raise ConfigError("tls_cert_file needs tls_key_file as well")
        if self.tls_key_file is not None and self.tls_cert_file is None:
            raise ConfigError("tls_key_file needs tls_cert_file as well")

    def identify_body(self, client_id: str, hostname: str) -> dict[str, Any]:
        """The IDENTIFY JSON fields, durations in milliseconds, ``-1`` for off.

        ``client_id`` and ``hostname`` are used where the config leaves them
        unset (the caller looks up the machine's name).
        """

        def ms(seconds: float | None) -> int:
            return -1 if seconds is None else to_milliseconds(seconds, "a duration")

        buffer_size = self.output_buffer_size

        body: dict[str, Any] = {
            "client_id": self.client_id if self.client_id is not None else client_id,
            "hostname": self.hostname if self.hostname is not None else hostname,
            "feature_negotiation": True,
            "heartbeat_interval": ms(self.heartbeat_interval),
            "output_buffer_size": -1 if buffer_size is None else buffer_size,
            "output_buffer_timeout": ms(self.output_buffer_timeout),
            "tls_v1": self.tls_v1,
            "snappy": self.snappy,
            "deflate": self.deflate,
            "deflate_level": self.deflate_level,
            "sample_rate": self.sample_rate,
            "user_agent": self.user_agent,
        }
        if self.msg_timeout is not None:
            body["msg_timeout"] = ms(self.msg_timeout)
        return body


@dataclass(frozen=True, kw_only=True)
class ConsumerConfig(Validated):
    """What drives a consumer's flow, retries and discovery. Durations are seconds.

    ``max_attempts=0`` retries forever; ``max_in_flight=0`` pauses the flow.
    ``concurrency=None`` sizes the handler pool to ``max_in_flight``.

    ``dead_letter_topic`` names the topic a message past ``max_attempts`` is
    published to before it is finished (``None``: none, the message is only
    handed to ``on_giving_up``); ``dead_letter_envelope`` wraps it in a JSON
    envelope (see :mod:`gnsqlite.deadletter`); ``dead_letter_nsqd`` is where
    to publish it (``"host:port"``, several as a list or comma-separated;
    empty: the nsqd that delivered the message); ``dead_letter_timeout``
    bounds each such publish.

    ``max_lease`` bounds the lease extension: while a handler (or a batch
    handler) holds a message, the consumer sends TOUCH whenever less than
    half its ``msg_timeout`` is left, until ``max_lease`` seconds after its
    delivery (capped by nsqd's negotiated ``max_msg_timeout``: the default,
    ``inf``, means "as long as nsqd allows"); ``0`` or ``None`` sends no
    TOUCH (see :mod:`gnsqlite.consumer.lease`). ``max_age`` is a TTL: a
    message whose nsqd timestamp is more than ``max_age`` seconds old when
    its handler would start is not handled but finished, or dead-lettered
    when ``dead_letter_topic`` is set (``None``: no limit).
    """

    max_in_flight: int = option(1, int, lo=0)
    concurrency: int | None = option(None, int, lo=1, nullable=True)
    max_attempts: int = option(5, int, lo=0)
    requeue_delay: float = option(90.0, float, lo=0.0, unit="s")
    max_requeue_delay: float = option(900.0, float, lo=0.0, unit="s")
    max_backoff_duration: float = option(128.0, float, lo=0.0, unit="s")
    lookupd_poll_interval: float = option(60.0, float, lo=0.01, unit="s")
    lookupd_poll_jitter: float = option(0.3, float, lo=0.0, hi=1.0)
    lookupd_request_timeout: float = option(2.0, float, lo=0.001, unit="s")
    low_rdy_idle_timeout: float = option(10.0, float, lo=0.001, unit="s")
    #: When RDY rotates (max_in_flight < connections), the longest a connection
    #: holds it while others wait, busy or not (go-nsq's name and default); while
    #: a waiting one is known to have messages, a turn lasts one
    #: rdy_redistribute_interval instead (see gnsqlite.flow.rdy).
    low_rdy_timeout: float = option(defaults.LOW_RDY_TIMEOUT, float, lo=0.001, unit="s")
    #: How often RDY is shared out again (an evaluation: cheap, a pass over the
    #: connections). 1 s, not go-nsq's 5 s: demand moves, and scarce RDY turns
    #: pass, at this pace (see gnsqlite.flow.rdy).
    rdy_redistribute_interval: float = option(1.0, float, lo=0.001, unit="s")
    reconnect_interval: float = option(1.0, float, lo=0.001, unit="s")
    max_reconnect_interval: float = option(60.0, float, lo=0.001, unit="s")
    dead_letter_topic: str | None = option(None, str, nullable=True)
    dead_letter_envelope: bool = option(False, bool)
    #: Normalised to a tuple of ``"host:port"``; a str may list several, comma-separated.
    dead_letter_nsqd: tuple[str, ...] = option((), (tuple, list, str))
    dead_letter_timeout: float = option(5.0, float, lo=0.001, unit="s")
    max_lease: float | None = option(
        math.inf,
        float,
        lo=0.0,
        nullable=True,
        unit="s",
        doc="TOUCH a held message until this long after its delivery (inf: as nsqd allows)",
    )
    max_age: float | None = option(
        None,
        float,
        above=0.0,
        nullable=True,
        unit="s",
        doc="finish (or dead-letter) unhandled a message older than this by nsqd's timestamp",
    )

    _ORDERED: ClassVar[tuple[tuple[str, str], ...]] = (
        ("requeue_delay", "max_requeue_delay"),
        ("reconnect_interval", "max_reconnect_interval"),
    )

    def _check_rules(self) -> None:
        given = self.dead_letter_nsqd
        if isinstance(given, str):
            given = [part.strip() for part in given.split(",") if part.strip()]
        # frozen: the one normalisation done after the field checks
        object.__setattr__(self, "dead_letter_nsqd", normalize_addresses("dead_letter_nsqd", given))
        topic = self.dead_letter_topic
        if topic is None:
            if self.dead_letter_envelope or self.dead_letter_nsqd:
                raise ConfigError(
                    "dead_letter_envelope and dead_letter_nsqd need a dead_letter_topic:"
                    " pass dead_letter_topic='orders.dead'"
                )
            return
        try:
            check_topic_name(topic)
        except InvalidNameError as exc:
            raise InvalidNameError(f"dead_letter_topic: {exc}") from None
        if self.max_attempts == 0:
            raise ConfigError(
                f"dead_letter_topic={topic!r} needs max_attempts of 1 or more:"
                " with max_attempts=0 no message is ever given up"
            )


@dataclass(frozen=True, kw_only=True)
class ProducerConfig(Validated):
    """What drives a producer (``Producer.config``): timeout, size limits, reconnects, discovery.

    Durations are seconds, sizes bytes. ``max_message_size`` and
    ``max_body_size`` mirror nsqd's ``--max-msg-size`` and ``--max-body-size``.
    The ``lookupd_*`` options apply to a producer given
    ``lookupd_http_addresses``: polls every ``lookupd_poll_interval``
    stretched by up to ``lookupd_poll_jitter`` of it (the Consumer's names and
    defaults), each request bounded by ``lookupd_request_timeout``;
    ``lookupd_topic`` publishes to the nsqd lookupd lists for that topic
    while it lists any, else to every nsqd it knows (``None``: every nsqd).
    """

    timeout: float = option(5.0, float, lo=0.001, unit="s")
    max_message_size: int = option(defaults.MAX_MSG_SIZE, int, lo=1, unit="bytes")
    max_body_size: int = option(defaults.MAX_BODY_SIZE, int, lo=1, unit="bytes")
    reconnect_interval: float = option(1.0, float, lo=0.001, unit="s")
    max_reconnect_interval: float = option(60.0, float, lo=0.001, unit="s")
    lookupd_poll_interval: float = option(60.0, float, lo=0.01, unit="s")
    lookupd_poll_jitter: float = option(0.3, float, lo=0.0, hi=1.0)
    lookupd_request_timeout: float = option(2.0, float, lo=0.001, unit="s")
    lookupd_topic: str | None = option(None, str, nullable=True)

    _ORDERED: ClassVar[tuple[tuple[str, str], ...]] = (
        ("reconnect_interval", "max_reconnect_interval"),
    )

    def _check_rules(self) -> None:
        if self.lookupd_topic is not None:
            try:
                check_topic_name(self.lookupd_topic)
            except InvalidNameError as exc:
                raise InvalidNameError(f"lookupd_topic: {exc}") from None
