"""The one option mechanism: options declared once, validated, immutable.

A set of options is a frozen dataclass deriving from :class:`Validated`,
each field declared with :func:`option`: its default, type, range and unit,
and how each front end spells it (``flag``: the command line's flag,
nsqd's name for the broker; ``key``: a Spark option key; ``keyword``: a
pynsq keyword), with ``doc`` for help texts. The client's configs
(:mod:`gnsqlite.config`), the broker's options, the batch's options, Spark's
and the drop-in's all use it, so a bad value raises the same
:class:`~gnsqlite.errors.ConfigError` everywhere, naming the option, the
value and the allowed range. :func:`options_of` lists a class's declarations
(:class:`Option`) for the front ends that build parsers and tables from them.

Durations are float seconds, sizes bytes. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from .errors import ConfigError

__all__ = ["Option", "Validated", "option", "options_of", "unknown_option"]

_T = TypeVar("_T", bound="Validated")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_NONE = {"", "none", "null", "off", "disabled", "-1"}


def option(
    default: Any,
    kind: type | tuple[type, ...],
    *,
    lo: float | None = None,
    hi: float | None = None,
    above: float | None = None,
    nullable: bool = False,
    unit: str = "",
    secret: bool = False,
    compare: bool = True,
    doc: str = "",
    flag: str | None = None,
    metavar: str | None = None,
    key: str | None = None,
    keyword: str | None = None,
    scope: str | None = None,
    parse: Callable[[str], Any] | None = None,
) -> Any:
    """Declare a validated option: its default, type, range, unit and spellings.

    ``lo``/``hi`` are inclusive bounds, ``above`` an exclusive lower one;
    ``nullable`` allows ``None`` (the feature disabled); ``secret`` hides the
    value from ``repr``; ``compare=False`` leaves it out of equality. ``doc``
    says what it does (help texts, tables); ``flag`` is its command-line flag
    (without dashes), ``metavar`` the flag's value name, ``key`` its Spark
    option key, ``keyword`` its pynsq keyword, ``scope`` where a front end
    uses it (Spark: ``"source"``, ``"sink"`` or ``"both"``). ``parse`` reads
    it from text (``from_mapping``, flags) where ``kind`` alone cannot; it
    raises ``ValueError`` for bad text.
    """
    meta = Option(
        name="",
        default=default,
        kinds=kind if isinstance(kind, tuple) else (kind,),
        lo=lo,
        hi=hi,
        above=above,
        nullable=nullable,
        unit=unit,
        doc=doc,
        flag=flag,
        metavar=metavar,
        key=key,
        keyword=keyword,
        scope=scope,
        parse=parse,
    )
    return field(default=default, repr=not secret, compare=compare, metadata={"option": meta})


@dataclass(frozen=True)
class Option:
    """One option's declaration, as :func:`option` recorded it (``name``: the field's)."""

    name: str
    default: Any
    kinds: tuple[type, ...]
    lo: float | None
    hi: float | None
    above: float | None
    nullable: bool
    unit: str
    doc: str
    flag: str | None
    metavar: str | None
    key: str | None
    keyword: str | None
    scope: str | None
    parse: Callable[[str], Any] | None

    def describe_range(self) -> str:
        """The allowed values in words (``"from 1 to 9"``, ``"above 0 s"``, ...)."""
        lo, hi = self.lo, self.hi
        unit = f" {self.unit}" if self.unit else ""
        if self.above is not None:
            text = f"above {self.above}{unit}"
            if hi is not None:
                text += f" and at most {hi}{unit}"
        elif lo is not None and hi is not None:
            text = f"from {lo} to {hi}{unit}"
        elif lo is not None:
            text = f"{lo}{unit} or more"
        elif hi is not None:
            text = f"{hi}{unit} or less"
        else:
            text = "any value"
        if self.nullable:
            text += ", or None to disable"
        return text

    def kind_name(self) -> str:
        """The accepted types in words (``"int"``, ``"str or bytes"``)."""
        return " or ".join(k.__name__ for k in self.kinds)

    def check(self, value: Any) -> None:
        """Raise :class:`ConfigError` unless ``value`` has the option's type and range."""
        name, kinds = self.name, self.kinds
        if value is None:
            if self.nullable:
                return
            raise ConfigError(f"{name}=None is not allowed: use {self.describe_range()}")
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            pass  # an int is a fine number of seconds
        elif isinstance(value, bool) and bool not in kinds:
            raise ConfigError(f"{name}={value!r} must be {self.kind_name()}, not a bool")
        elif object not in kinds and not isinstance(value, kinds):
            raise ConfigError(
                f"{name}={value!r} must be {self.kind_name()}, not {type(value).__name__}"
            )
        lo, hi, above = self.lo, self.hi, self.above
        if (
            (lo is not None and value < lo)
            or (hi is not None and value > hi)
            or (above is not None and value <= above)
            or value != value
        ):
            raise ConfigError(f"{name}={value!r} is out of range: use {self.describe_range()}")

    def from_text(self, text: str) -> Any:
        """The value ``text`` spells; raises :class:`ConfigError` naming the option."""
        lowered = text.strip().lower()
        if self.nullable and lowered in _NONE:
            return None
        kinds = self.kinds
        try:
            if self.parse is not None:
                return self.parse(text)
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
                f"{self.name}={text!r} is not {self.kind_name()}: use {self.describe_range()}"
            ) from None
        return text


def options_of(cls: type[Validated]) -> tuple[Option, ...]:
    """Every option ``cls`` declares with :func:`option`, in declaration order."""
    found = _DECLARED.get(cls)
    if found is None:
        found = _DECLARED[cls] = tuple(
            dataclasses.replace(f.metadata["option"], name=f.name)
            for f in dataclasses.fields(cls)
            if "option" in f.metadata
        )
    return found


#: class -> its declarations (a class's fields never change once it is defined)
_DECLARED: dict[type, tuple[Option, ...]] = {}


def unknown_option(key: str, names: Iterable[str], owner: str) -> ConfigError:
    """The error for an option ``owner`` does not know, with the closest name as a hint."""
    close = difflib.get_close_matches(key.lower(), [n.lower() for n in names], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ConfigError(f"unknown option {key!r} for {owner}{hint}")


@dataclass(frozen=True, kw_only=True)
class Validated:
    """Common machinery: per-option checks, ordered pairs, cross-option rules, parsing."""

    #: Pairs of options where the first may not be above the second.
    _ORDERED: ClassVar[tuple[tuple[str, str], ...]] = ()

    def __post_init__(self) -> None:
        for declared in options_of(type(self)):
            declared.check(getattr(self, declared.name))
        for low, high in self._ORDERED:
            if getattr(self, low) > getattr(self, high):
                raise ConfigError(
                    f"{low}={getattr(self, low)!r} is above {high}={getattr(self, high)!r}:"
                    f" raise {high} or lower {low}"
                )
        self._check_rules()

    def _check_rules(self) -> None:
        """Rules across options; subclasses extend this."""

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
        by_lower = {o.name.lower(): o for o in options_of(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            declared = by_lower.get(key.lower())
            if declared is None:
                if strict:
                    raise unknown_option(key, by_lower, cls.__name__)
                continue
            if isinstance(value, str) and (declared.parse or declared.kinds != (str,)):
                value = declared.from_text(value)
            kwargs[declared.name] = value
        return cls(**kwargs)

    def replace(self: _T, **changes: Any) -> _T:
        """A copy with some options changed, validated again."""
        return dataclasses.replace(self, **changes)
