"""The reconnect policy shared by the Consumer, the Producer and discovery."""

from __future__ import annotations

import math
import random
from typing import TypedDict

import pytest

from gnsqlite.errors import ConfigError
from gnsqlite.flow import Reconnect, reconnect_ceiling
from gnsqlite.producer import Producer

pytestmark = pytest.mark.no_server


def test_the_ceiling_doubles_from_the_interval_up_to_the_cap() -> None:
    ceilings = [reconnect_ceiling(n, 0.5, 6.0) for n in range(1, 7)]
    assert ceilings == [0.5, 1.0, 2.0, 4.0, 6.0, 6.0]
    assert reconnect_ceiling(0, 0.5, 6.0) == 0.0


@pytest.mark.parametrize("failures", [1024, 1025, 5000, 10**9])
def test_a_long_outage_gives_the_cap_instead_of_overflowing(failures: int) -> None:
    # interval * 2 ** (failures - 1) overflows a float from failures = 1025 on.
    with pytest.raises(OverflowError):
        _ = 1.0 * 2 ** (1025 - 1)
    assert reconnect_ceiling(failures, 1.0, 60.0) == 60.0
    assert reconnect_ceiling(failures, 0.001, 0.001) == 0.001
    assert reconnect_ceiling(failures, 1e300, 1.5e308) == 1.5e308
    assert reconnect_ceiling(failures, 2.0, math.inf) == math.inf


def test_delays_are_jittered_between_half_the_ceiling_and_the_ceiling() -> None:
    policy = Reconnect(1.0, 60.0, random.Random(7))
    delays = [policy.failed("a:1") for _ in range(5000)]
    ceilings = [reconnect_ceiling(n, 1.0, 60.0) for n in range(1, 5001)]
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert len(set(delays[10:])) > 4000  # jittered, not one value
    assert policy.failures("a:1") == 5000


def test_failures_are_counted_per_key_and_a_success_starts_again() -> None:
    policy = Reconnect(1.0, 60.0, random.Random(1))
    for _ in range(8):
        policy.failed("a:1")
    assert policy.failed("b:2") <= 1.0  # another address starts at the interval
    assert policy.failures("a:1") == 8
    policy.succeeded("a:1")
    assert policy.failures("a:1") == 0
    assert policy.failed("a:1") <= 1.0


class ProducerOptions(TypedDict, total=False):
    """The Producer options these cases set (seconds, and bytes for max_body_size)."""

    reconnect_interval: float
    max_reconnect_interval: float
    timeout: float
    max_body_size: int


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"reconnect_interval": 0.0}, "reconnect_interval=0.0 is out of range"),
        (
            {"reconnect_interval": 2.0, "max_reconnect_interval": 1.0},
            "reconnect_interval=2.0 is above",
        ),
        ({"timeout": -1}, "timeout=-1 is out of range"),
        ({"max_body_size": 0}, "max_body_size=0 is out of range"),
    ],
)
def test_a_producer_refuses_bad_options_naming_them(options: ProducerOptions, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Producer("127.0.0.1:4150", **options)
