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
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from ._version import __version__
from .errors import ConfigError, InvalidNameError
from .net import normalize_addresses
from .protocol.commands import to_milliseconds
from .protocol.names import check_topic_name

__all__ = [
    "ConnectionConfig",
    "ConsumerConfig",
    "ProducerConfig",
    "DEFAULT_USER_AGENT",
    "option",
    "split_options",
]

DEFAULT_USER_AGENT = f"gnsqlite/{__version__}"

_T = TypeVar("_T", bound="_Validated")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_NONE = {"", "none", "null", "off", "disabled", "-1"}


def option(
    default: Any,
    kind: type | tuple[type, ...],
    *,
    lo: float | None = None,
    hi: float | None = None,
    nullable: bool = False,
    unit: str = "",
    secret: bool = False,
) -> Any:
    """Declare a validated option: its default, type, range and unit.

    ``lo``/``hi`` are inclusive bounds; ``nullable`` allows ``None`` (the
    feature disabled); ``secret`` hides the value from ``repr``.
    """
    meta = {"kind": kind, "lo": lo, "hi": hi, "nullable": nullable, "unit": unit}
    return field(default=default, repr=not secret, metadata=meta)


def _describe_range(meta: Mapping[str, Any]) -> str:
    lo, hi, unit = meta["lo"], meta["hi"], meta["unit"]
    unit = f" {unit}" if unit else ""
    if lo is not None and hi is not None:
        text = f"from {lo} to {hi}{unit}"
    elif lo is not None:
        text = f"{lo}{unit} or more"
    elif hi is not None:
        text = f"{hi}{unit} or less"
    else:
        text = "any value"
    if meta["nullable"]:
        text += ", or None to disable"
    return text


def _check_field(name: str, value: Any, meta: Mapping[str, Any]) -> None:
    if value is None:
        if meta["nullable"]:
            return
        raise ConfigError(f"{name}=None is not allowed: use {_describe_range(meta)}")
    kind = meta["kind"]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        pass  # an int is a fine number of seconds
    elif isinstance(value, bool) and bool not in kinds:
        raise ConfigError(f"{name}={value!r} must be {_kind_name(kinds)}, not a bool")
    elif object not in kinds and not isinstance(value, kinds):
        raise ConfigError(
            f"{name}={value!r} must be {_kind_name(kinds)}, not {type(value).__name__}"
        )
    lo, hi = meta["lo"], meta["hi"]
    if (lo is not None and value < lo) or (hi is not None and value > hi) or value != value:
        raise ConfigError(f"{name}={value!r} is out of range: use {_describe_range(meta)}")


def _unknown_option(key: str, names: Iterable[str], owner: str) -> ConfigError:
    """The error for an option no config class knows, with the closest name as a hint."""
    close = difflib.get_close_matches(key.lower(), [n.lower() for n in names], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ConfigError(f"unknown option {key!r} for {owner}{hint}")


def split_options(
    options: Mapping[str, Any], classes: Sequence[type[_Validated]], owner: str
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
            raise _unknown_option(key, [n for group in names for n in group], owner)
    return out


def _kind_name(kinds: tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in kinds)


def _parse(name: str, text: str, meta: Mapping[str, Any]) -> Any:
    lowered = text.strip().lower()
    if meta["nullable"] and lowered in _NONE:
        return None
    kind = meta["kind"]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    try:
        if bool in kinds:
            if lowered in _TRUE:
                return True
            if lowered in _FALSE:
                return False
            raise ValueError(text)
        if int in kinds:
            return int(text)
        if float in kinds:
            return float(text)
    except ValueError:
        raise ConfigError(
            f"{name}={text!r} is not {_kind_name(kinds)}: use {_describe_range(meta)}"
        ) from None
    return text


@dataclass(frozen=True, kw_only=True)
class _Validated:
    """Common machinery: per-field checks, cross-field rules, parsing."""

    #: Pairs of options where the first may not be above the second.
    _ORDERED: ClassVar[tuple[tuple[str, str], ...]] = ()

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if f.metadata:
                _check_field(f.name, getattr(self, f.name), f.metadata)
        for low, high in self._ORDERED:
            if getattr(self, low) > getattr(self, high):
                raise ConfigError(
                    f"{low}={getattr(self, low)!r} is above {high}={getattr(self, high)!r}:"
                    f" raise {high} or lower {low}"
                )
        self._check_rules()

    def _check_rules(self) -> None:
        """Rules across fields; subclasses extend this."""

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The names of every option, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_mapping(cls: type[_T], values: Mapping[str, Any], *, strict: bool = True) -> _T:
        """Build from a mapping whose values may be strings.

        Keys match option names case-insensitively. With ``strict``, an
        unknown key raises :class:`ConfigError` naming it (and the closest
        option); without, unknown keys are ignored.
        """
        by_lower = {f.name.lower(): f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            f = by_lower.get(key.lower())
            if f is None:
                if strict:
                    raise _unknown_option(key, by_lower, cls.__name__)
                continue
            if isinstance(value, str) and f.metadata and f.metadata["kind"] is not str:
                value = _parse(f.name, value, f.metadata)
            kwargs[f.name] = value
        return cls(**kwargs)

    def replace(self: _T, **changes: Any) -> _T:
        """A copy with some options changed, validated again."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, kw_only=True)
class ConnectionConfig(_Validated):
    """What a connection tells nsqd in IDENTIFY, and how it connects.

    Durations are seconds. ``heartbeat_interval``, ``output_buffer_size`` and
    ``output_buffer_timeout`` accept ``None`` to disable the feature.
    ``tls_context`` (an ``ssl.SSLContext``) overrides ``tls_ca_file``,
    ``tls_cert_file``, ``tls_key_file`` and ``tls_verify``.
    """

    client_id: str | None = option(None, str, nullable=True)
    hostname: str | None = option(None, str, nullable=True)
    heartbeat_interval: float | None = option(30.0, float, lo=1.0, nullable=True, unit="s")
    output_buffer_size: int | None = option(16384, int, lo=64, nullable=True, unit="bytes")
    output_buffer_timeout: float | None = option(
        0.25, float, lo=0.001, nullable=True, unit="s"
    )
    tls_v1: bool = option(False, bool)
    tls_verify: bool = option(True, bool)
    tls_ca_file: str | None = option(None, str, nullable=True)
    tls_cert_file: str | None = option(None, str, nullable=True)
    tls_key_file: str | None = option(None, str, nullable=True)
    tls_context: Any = option(None, object, nullable=True, secret=True)
    snappy: bool = option(False, bool)
    deflate: bool = option(False, bool)
    deflate_level: int = option(6, int, lo=1, hi=9)
    sample_rate: int = option(0, int, lo=0, hi=99, unit="%")
    user_agent: str = option(DEFAULT_USER_AGENT, str)
    msg_timeout: float | None = option(None, float, lo=1.0, nullable=True, unit="s")
    auth_secret: str | bytes | None = option(None, (str, bytes), nullable=True, secret=True)
    connect_timeout: float = option(5.0, float, lo=0.001, unit="s")
    close_timeout: float = option(5.0, float, lo=0.0, unit="s")
    max_frame_size: int = option(16 * 1024 * 1024, int, lo=1024, unit="bytes")

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
class ConsumerConfig(_Validated):
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
    low_rdy_timeout: float = option(30.0, float, lo=0.001, unit="s")
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
class ProducerConfig(_Validated):
    """What drives a producer (``Producer.config``): its call timeout, size limits and reconnects.

    Durations are seconds, sizes bytes. ``max_message_size`` and
    ``max_body_size`` mirror nsqd's ``--max-msg-size`` and ``--max-body-size``.
    """

    timeout: float = option(5.0, float, lo=0.001, unit="s")
    max_message_size: int = option(1024 * 1024, int, lo=1, unit="bytes")
    max_body_size: int = option(5 * 1024 * 1024, int, lo=1, unit="bytes")
    reconnect_interval: float = option(1.0, float, lo=0.001, unit="s")
    max_reconnect_interval: float = option(60.0, float, lo=0.001, unit="s")

    _ORDERED: ClassVar[tuple[tuple[str, str], ...]] = (
        ("reconnect_interval", "max_reconnect_interval"),
    )
