"""Backoff: how long a consumer stops taking messages after failures.

A *strategy* turns a backoff level (1, 2, 3 ...) into a duration in seconds:
:class:`ExponentialBackoff` (the default: ``base * 2 ** (level - 1)``) or
:class:`FullJitterBackoff` (a uniform draw between 0 and that). Any object
with a ``duration(level) -> float`` method will do.

:class:`Backoff` is the state machine the client-library guide describes,
pure and driven by the caller:

* a failure raises the level and starts a window: :class:`Pause` (send
  ``RDY 0`` everywhere for ``duration`` seconds);
* when the window ends, :class:`Probe` (``RDY 1`` to one connection, to test
  the waters);
* each success lowers the level; at level 0 the flow returns in full
  (:class:`Resume`), otherwise a shorter window starts;
* results that arrive *during* a window are ignored for the count: they
  belong to messages taken before the flow stopped.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigError

__all__ = [
    "BackoffStrategy",
    "ExponentialBackoff",
    "FullJitterBackoff",
    "Pause",
    "Probe",
    "Resume",
    "Backoff",
    "make_backoff_strategy",
]

#: A level this high is beyond any sensible cap; it bounds user strategies.
_MAX_LEVEL = 64


@runtime_checkable
class BackoffStrategy(Protocol):
    """Anything that turns a backoff level (1 or more) into seconds."""

    def duration(self, level: int) -> float:
        """The backoff window for ``level``, in seconds."""
        ...


@dataclass(frozen=True)
class ExponentialBackoff:
    """``base * 2 ** (level - 1)`` seconds: 1, 2, 4, 8 ... with the default base."""

    base: float = 1.0

    def __post_init__(self) -> None:
        if not self.base > 0:
            raise ConfigError(f"backoff base={self.base!r} is out of range: use more than 0 s")

    def duration(self, level: int) -> float:
        return float(self.base * 2 ** min(level - 1, _MAX_LEVEL))


@dataclass(frozen=True)
class FullJitterBackoff:
    """A uniform draw in ``[0, base * 2 ** (level - 1)]`` seconds ("full jitter")."""

    base: float = 1.0
    rng: random.Random = field(default_factory=random.Random, compare=False)

    def __post_init__(self) -> None:
        if not self.base > 0:
            raise ConfigError(f"backoff base={self.base!r} is out of range: use more than 0 s")

    def duration(self, level: int) -> float:
        return self.rng.uniform(0.0, self.base * 2 ** min(level - 1, _MAX_LEVEL))


def make_backoff_strategy(spec: Any) -> BackoffStrategy | None:
    """The strategy for a ``backoff=`` option.

    ``"exponential"`` (default), ``"full_jitter"``, ``None``/``False``/``"off"``
    (no backoff), or an object with ``duration(level)``.
    """
    if spec is None or spec is False or spec == "off":
        return None
    if spec == "exponential" or spec is True:
        return ExponentialBackoff()
    if spec == "full_jitter":
        return FullJitterBackoff()
    if isinstance(spec, BackoffStrategy):
        return spec
    raise ConfigError(
        f"backoff={spec!r} is not a strategy: use 'exponential', 'full_jitter', None,"
        " or an object with a duration(level) method"
    )


@dataclass(frozen=True)
class Pause:
    """Send ``RDY 0`` everywhere; call :meth:`Backoff.window_ended` after ``duration`` s."""

    duration: float


@dataclass(frozen=True)
class Probe:
    """Send ``RDY 1`` to one connection (and ``RDY 0`` to the others)."""


@dataclass(frozen=True)
class Resume:
    """Backoff is over: give every connection its full share of RDY again."""


Action = Pause | Probe | Resume


class Backoff:
    """The backoff state machine; see the module docstring.

    ``max_duration`` (seconds) caps every window, and the level stops rising
    once the strategy's windows reach it, so a long run of failures does not
    need as long a run of successes to recover.
    """

    NORMAL = "normal"
    WINDOW = "window"
    PROBING = "probing"

    def __init__(self, strategy: BackoffStrategy, max_duration: float) -> None:
        self.strategy = strategy
        self.max_duration = max_duration
        self.level = 0
        self.state = self.NORMAL
        self.window_until: float | None = None
        self.max_level = self._max_level()
        self._capped = False  # the last window reached max_duration

    def _max_level(self) -> int:
        base = getattr(self.strategy, "base", None)
        if isinstance(base, (int, float)) and base > 0 and self.max_duration > 0:
            return max(1, math.ceil(math.log2(max(self.max_duration / base, 1.0))) + 1)
        return _MAX_LEVEL

    @property
    def active(self) -> bool:
        """True while the flow is reduced (in a window or probing)."""
        return self.state != self.NORMAL

    def _pause(self, now: float) -> Pause:
        wanted = max(0.0, self.strategy.duration(self.level))
        # A strategy without ``base`` (any user object) is capped here: once
        # its windows reach max_duration, a further failure does not raise the level.
        self._capped = wanted >= self.max_duration
        duration = min(self.max_duration, wanted)
        self.state = self.WINDOW
        self.window_until = now + duration
        return Pause(duration)

    def failure(self, now: float) -> Action | None:
        """A message failed (requeued with backoff); returns what to do, if anything."""
        if self.state == self.WINDOW:
            return None
        if not (self._capped and self.level > 0):
            self.level = min(self.level + 1, self.max_level)
        return self._pause(now)

    def success(self, now: float) -> Action | None:
        """A message succeeded; returns what to do, if anything."""
        if self.state == self.WINDOW or self.level == 0:
            return None
        self.level -= 1
        if self.level == 0:
            self.state = self.NORMAL
            self.window_until = None
            return Resume()
        return self._pause(now)

    def window_ended(self, now: float) -> Action | None:
        """The window's timer fired: test the waters with one message."""
        if self.state != self.WINDOW:
            return None
        self.state = self.PROBING
        self.window_until = None
        return Probe()

    def describe(self, now: float) -> dict[str, Any]:
        """The state for ``stats()``: state, level and seconds left in the window."""
        left = None if self.window_until is None else max(0.0, self.window_until - now)
        return {"state": self.state, "level": self.level, "window_left": left}
