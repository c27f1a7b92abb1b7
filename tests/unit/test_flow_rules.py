"""The flow rules written once, and the hot-path copies that name them, agree.

``gnsqlite.flow.link_plan.starved`` is the guide's *starved* rule; the
planner's per-message paths (``message_received``, ``message_done``) keep
their own copy for speed. A seeded random walk of receives, answers and RDY
changes checks after every step that the planner's starved set says what
the rule says. The seed is printed on failure.
"""

from __future__ import annotations

import itertools
import random

import pytest

from gnsqlite.flow import RdyPlanner
from gnsqlite.flow.link_plan import may_hold, starved

pytestmark = pytest.mark.no_server


@pytest.mark.parametrize("seed", [1, 2, 3, 38, 2026])
def test_the_per_message_starved_copy_agrees_with_the_rule(seed: int) -> None:
    rng = random.Random(seed)
    planner = RdyPlanner(max_in_flight=rng.choice([1, 2, 5, 20, 100]), rng=rng)
    held: dict[str, list[object]] = {name: [] for name in ("a", "b", "c")}
    now = 0.0
    for name, messages in held.items():
        planner.add(name, 2500, now, messages)
    for step in range(2000):
        now += rng.random() / 10
        name = rng.choice(sorted(held))
        flow = planner.conns[name]
        action = rng.random()
        if action < 0.5:
            held[name].append(object())
            planner.message_received(flow, now)
        elif action < 0.9 and held[name]:
            held[name].pop()
            planner.message_done(flow, now)
        elif action < 0.95:
            planner.redistribute(now)
        else:
            planner.set_max_in_flight(rng.choice([1, 2, 5, 20, 100]), now)
        for other, f in planner.conns.items():
            expected = starved(len(held[other]), f.last_rdy)
            assert (other in planner.starved_names) is expected, (
                f"seed={seed} step={step}: {other} in_flight={len(held[other])}"
                f" last_rdy={f.last_rdy}: the planner says starved="
                f"{other in planner.starved_names}, the rule {expected}"
            )
            assert f.starved is expected
            assert f.listed_starved is expected  # the per-message paths' test of membership


def test_starved_is_85_percent_of_the_last_rdy_and_never_with_nothing_in_flight() -> None:
    assert not starved(0, 0)
    assert starved(1, 1)
    assert not starved(16, 20)
    assert starved(17, 20)  # 85% of 20
    assert starved(3, 0)  # RDY lowered to 0 while messages were on the wire


def test_what_nsqd_may_hold_is_the_rdy_or_more_in_flight_or_the_reserve() -> None:
    assert may_hold(5, 2) == 5
    assert may_hold(1, 3) == 3  # a lowered RDY: what was sent before still arrives
    assert may_hold(1, 0, reserve=4) == 4
    # the largest of the three wherever it stands (written out, not max(): see its comment)
    for last_rdy, in_flight, reserve in itertools.permutations((0, 7, 9)):
        assert may_hold(last_rdy, in_flight, reserve) == 9
    assert may_hold(4, 4, 4) == 4
