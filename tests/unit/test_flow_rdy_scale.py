"""The RDY planner's per-answer path stays O(1) as connections grow, with the same RDY.

An answer that frees budget while a connection is below its target used to
run the planner's O(n) fill (every connection's commitment summed, the short
ones sorted) on every answer, though a grant waits until it can add a quarter
of the target: with 50 connections that pass ran on most answers.
The planner now notes how much budget the connections it left short wait
for, and fills again only when answers freed that much. These tests drive
the simulated nsqd of ``test_flow_rdy_sim`` with seeded traffic (the seed is
in the test's id) and compare it with a planner that fills on every answer
as before.
"""

from __future__ import annotations

import functools
import random

import pytest
from test_flow_rdy_sim import Sim

from gnsqlite.flow import LinkPlan, RdyPlanner
from gnsqlite.flow.link_plan import Command

pytestmark = pytest.mark.no_server


class Counting(RdyPlanner):
    """The planner, counting the fill passes answers cause."""

    answer_fills = 0

    def message_done(self, flow, now=None):  # type: ignore[no-untyped-def]
        self._in_answer = True
        try:
            return super().message_done(flow, now)
        finally:
            self._in_answer = False

    def _fill(self, now: float | None, out: list[Command], eager: bool = True) -> None:
        if getattr(self, "_in_answer", False):
            self.answer_fills += 1
        super()._fill(now, out, eager)


class EveryAnswer(Counting):
    """The rule before: every answer that frees budget while one is short fills."""

    def _fill(self, now: float | None, out: list[Command], eager: bool = True) -> None:
        super()._fill(now, out, eager)
        self._fill_after = 1


SEEDS = range(12)


@functools.cache
def run(planner_class: type[Counting], seed: int) -> tuple[list[tuple[float, Command]], int]:
    """Seeded traffic over up to 50 connections; the RDY commands sent, in order, and the fills."""
    rng = random.Random(seed)
    conns = rng.choice([5, 20, 50])
    planner = planner_class(
        rng.choice([conns, 10 * conns, 2500]), low_rdy_idle_timeout=1.0, rng=random.Random(seed)
    )
    sim = Sim(planner, interval=rng.choice([0.2, 1.0]), service=rng.choice([0.05, 0.3]), rng=rng)
    sent: list[tuple[float, Command]] = []
    send = sim.send

    def record(commands: list[Command]) -> None:
        sent.extend((sim.now, c) for c in commands)
        send(commands)

    sim.send = record  # type: ignore[method-assign,assignment]
    for _ in range(conns):
        sim.join(rng.choice([20.0, 200.0, 2000.0]))
    for _ in range(3):
        for server in sim.nsqd.values():
            if rng.random() < 0.5:
                server.rate = rng.choice([0.0, 20.0, 200.0, 2000.0])
        sim.run(1.5)
    return sent, planner.answer_fills


@pytest.mark.parametrize("seed", SEEDS)
def test_the_same_rdy_as_filling_on_every_answer(seed: int) -> None:
    ours, fills = run(Counting, seed)
    before, before_fills = run(EveryAnswer, seed)
    assert ours == before, f"seed {seed}"
    assert fills <= before_fills, f"seed {seed}"


def test_answers_fill_a_fraction_of_the_times_they_did() -> None:
    ours = sum(run(Counting, seed)[1] for seed in SEEDS)
    before = sum(run(EveryAnswer, seed)[1] for seed in SEEDS)
    print(f"fill passes on answers: {ours} (filling on every answer: {before})")
    assert ours * 4 <= before, (ours, before)


def test_a_rotation_pass_compares_no_records_field_by_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Rotation (max_in_flight below the connections) looked records up in lists,
    # comparing dataclasses field by field: O(n * max_in_flight) a pass, 175 ms at
    # 1,000 connections and max_in_flight 500. It keeps sets of identities now.
    planner = RdyPlanner(100, low_rdy_idle_timeout=1.0, rng=random.Random(7))
    for i in range(200):
        planner.add(f"n{i:03}", 2500, 0.0, [])
    compared = 0
    original = LinkPlan.__eq__

    def counting_eq(self: LinkPlan, other: object) -> bool:
        nonlocal compared
        compared += 1
        return original(self, other)

    monkeypatch.setattr(LinkPlan, "__eq__", counting_eq)
    for second in range(1, 6):
        planner.redistribute(float(second))
    assert planner.scarce and planner.total_rdy == 100
    assert compared == 0
