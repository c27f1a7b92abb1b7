"""pynsq's ``BackoffTimer``: an interval that grows on failures and shrinks on successes.

pynsq's Reader uses one to pace its backoff; the drop-in's Reader leaves
backoff to the gnsqlite Consumer (:mod:`gnsqlite.flow.backoff`), and this
class is here for programs that use the timer themselves. Its arithmetic is
pynsq's, in :class:`~decimal.Decimal` so the intervals are exact: the range
``max_interval - min_interval`` is split into a short part (``ratio`` of it,
reached after ``short_length`` failures) and a long part (the rest, reached
after ``long_length`` failures); each failure adds one step of each, each
success takes one step of each away.
"""

from __future__ import annotations

from decimal import Decimal

__all__ = ["BackoffTimer"]


def _decimal(value: int | float | Decimal) -> Decimal:
    return value if isinstance(value, Decimal) else Decimal(str(value))


class BackoffTimer:
    """Exponential-ish backoff between ``min_interval`` and ``max_interval`` seconds."""

    def __init__(
        self,
        min_interval: int | float | Decimal,
        max_interval: int | float | Decimal,
        ratio: float = 0.25,
        short_length: int = 10,
        long_length: int = 250,
    ) -> None:
        for name, value in (("min_interval", min_interval), ("max_interval", max_interval)):
            if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
                raise AssertionError(f"{name} must be a number of seconds, not {value!r}")
        self.min_interval = _decimal(min_interval)
        self.max_interval = _decimal(max_interval)
        span = self.max_interval - self.min_interval
        self.max_short_timer = span * _decimal(ratio)
        self.max_long_timer = span * (1 - _decimal(ratio))
        self.short_unit = self.max_short_timer / _decimal(short_length)
        self.long_unit = self.max_long_timer / _decimal(long_length)
        self.short_interval = Decimal(0)
        self.long_interval = Decimal(0)
        self.interval = 0.0
        self.update_interval()

    def success(self) -> None:
        """One success: take a step off both parts (never below zero)."""
        if self.interval == 0.0:
            return
        self.short_interval = max(self.short_interval - self.short_unit, Decimal(0))
        self.long_interval = max(self.long_interval - self.long_unit, Decimal(0))
        self.update_interval()

    def failure(self) -> None:
        """One failure: add a step to both parts (never past their share of the range)."""
        self.short_interval = min(self.short_interval + self.short_unit, self.max_short_timer)
        self.long_interval = min(self.long_interval + self.long_unit, self.max_long_timer)
        self.update_interval()

    def update_interval(self) -> None:
        """Recompute :attr:`interval` (float seconds) from the two parts."""
        self.interval = float(self.min_interval + self.short_interval + self.long_interval)

    def get_interval(self) -> float:
        """The current interval, in seconds."""
        return self.interval
