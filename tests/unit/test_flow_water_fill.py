"""The RDY planner's water filling: the same shares as one unit at a time, in O(n log budget).

An RDY evaluation shares ``max_in_flight`` by water filling. Poured one unit
a step, a consumer with one connection and ``max_in_flight`` 2,500 spent
about a millisecond of CPU on every evaluation (every 5 s, for each
consumer: 200 idle consumers of a crawler used 5% of a core doing it);
``benchmarks/scale.py`` measures the pass.
"""

from __future__ import annotations

import random

import pytest

from gnsqlite.flow.link_plan import smallest_first, water_fill

pytestmark = pytest.mark.no_server


def unit_by_unit(asks: dict[str, int], caps: dict[str, int], budget: int) -> dict[str, int]:
    """The rule as the docstring states it, the leftover one unit at a time (slow)."""
    alloc, remaining = smallest_first(asks, budget)
    names = sorted(asks)
    for wanting in (True, False):
        while remaining > 0:
            takers = [
                n for n in names if alloc[n] < caps[n] and (not wanting or alloc[n] < asks[n])
            ]
            if not takers:
                break
            level = min(alloc[n] for n in takers)
            for n in takers:
                if remaining > 0 and alloc[n] == level:
                    alloc[n] += 1
                    remaining -= 1
    return alloc


@pytest.mark.parametrize("seed", range(300))
def test_the_shares_are_those_of_one_unit_at_a_time(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([1, 2, 3, 5, 10, 50])
    caps = {f"n{i}": rng.choice([1, 3, 50, 200, 2500]) for i in range(n)}
    asks = {name: rng.randint(1, cap) for name, cap in caps.items()}
    budget = rng.choice([0, 1, n, rng.randint(0, 3000), sum(caps.values()) + 7])
    assert water_fill(asks, caps, budget) == unit_by_unit(asks, caps, budget), f"seed {seed}"


class CountedCaps(dict[str, int]):
    """``caps`` that count how often they are read."""

    reads = 0

    def __getitem__(self, key: str) -> int:
        self.reads += 1
        return super().__getitem__(key)


def test_a_pass_reads_each_cap_a_few_times_not_once_per_unit_of_budget() -> None:
    # One connection asking for 1 (it dried up) of a budget of 2,500: 2,499 units
    # are left over. Poured one at a time, that read its cap 2,499 times a pass.
    caps = CountedCaps({"127.0.0.1:4150": 2500})
    assert water_fill({"127.0.0.1:4150": 1}, caps, 2500) == {"127.0.0.1:4150": 2500}
    assert caps.reads <= 2
    caps = CountedCaps({f"n{i}": 2500 for i in range(50)})
    asks = {name: 1 + i % 3 for i, name in enumerate(caps)}
    assert sum(water_fill(asks, caps, 100_000).values()) == 100_000
    assert caps.reads <= 2 * len(caps)
