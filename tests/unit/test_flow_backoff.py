"""The backoff state machine and strategies, with a fake clock."""

from __future__ import annotations

import random

import pytest

from gnsqlite.errors import ConfigError
from gnsqlite.flow import (
    Backoff,
    ExponentialBackoff,
    FullJitterBackoff,
    Pause,
    Probe,
    Resume,
    make_backoff_strategy,
)

pytestmark = pytest.mark.no_server


def test_exponential_durations() -> None:
    s = ExponentialBackoff(base=0.5)
    assert [s.duration(level) for level in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]


def test_full_jitter_stays_under_the_exponential_ceiling() -> None:
    s = FullJitterBackoff(base=1.0, rng=random.Random(3))
    draws = [s.duration(4) for _ in range(200)]
    assert all(0.0 <= d <= 8.0 for d in draws)
    assert len(set(draws)) > 100


def test_failure_pause_probe_then_successes_shorten_to_resume() -> None:
    b = Backoff(ExponentialBackoff(1.0), max_duration=128.0)
    assert b.failure(0.0) == Pause(1.0)
    assert b.failure(0.5) is None  # during the window: ignored
    assert b.success(0.6) is None
    assert b.window_ended(1.0) == Probe()
    assert b.failure(1.1) == Pause(2.0)  # probe failed: longer
    assert b.window_ended(3.1) == Probe()
    assert b.success(3.2) == Pause(1.0)  # level 2 -> 1: shorter window
    assert b.window_ended(4.2) == Probe()
    assert b.success(4.3) == Resume()
    assert not b.active
    assert b.success(5.0) is None


def test_windows_are_capped_and_the_level_stops_rising() -> None:
    b = Backoff(ExponentialBackoff(1.0), max_duration=8.0)
    durations = []
    now = 0.0
    for _ in range(10):
        action = b.failure(now)
        assert isinstance(action, Pause)
        durations.append(action.duration)
        now += action.duration
        b.window_ended(now)
    assert durations[:4] == [1.0, 2.0, 4.0, 8.0]
    assert max(durations) == 8.0
    assert b.level == b.max_level == 4


def test_strategy_option() -> None:
    assert make_backoff_strategy(None) is None
    assert make_backoff_strategy("off") is None
    assert isinstance(make_backoff_strategy("exponential"), ExponentialBackoff)
    assert isinstance(make_backoff_strategy("full_jitter"), FullJitterBackoff)

    class Constant:
        def duration(self, level: int) -> float:
            return 0.25

    custom = Constant()
    assert make_backoff_strategy(custom) is custom
    with pytest.raises(ConfigError, match="backoff='sometimes'"):
        make_backoff_strategy("sometimes")
    with pytest.raises(ConfigError, match="base"):
        ExponentialBackoff(base=0)


def test_a_custom_strategy_stops_rising_at_the_cap_too() -> None:
    class Doubling:  # no ``base``: the cap must come from its windows
        def duration(self, level: int) -> float:
            return float(2 ** (level - 1))

    b = Backoff(Doubling(), max_duration=8.0)
    now = 0.0
    for _ in range(30):  # a long outage: every probe fails
        action = b.failure(now)
        assert isinstance(action, Pause)
        now += action.duration
        b.window_ended(now)
    assert b.level == 4  # 8 s reached at level 4: no higher
    successes = 0
    while b.active:
        successes += 1
        action = b.success(now)
        if isinstance(action, Pause):
            now += action.duration
            b.window_ended(now)
    assert successes == 4  # recovery is as quick as with the built-in strategy
