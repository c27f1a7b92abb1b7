"""The RDY policy against simulated nsqd, with a fake clock.

Each simulated nsqd has a backlog fed at its own arrival rate and sends a
message whenever its in-flight count for the connection is below the RDY it
was last sent (nsqd's rule); the simulated handler answers each message after
a fixed service time. Hypothesis draws the setting and a seed; the seed drives
arrivals, connections joining and leaving, ``set_max_in_flight`` and backoff.
On a failure hypothesis prints the drawn example (seed included).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gnsqlite.config import ConsumerConfig
from gnsqlite.flow import LinkPlan, RdyPlanner
from gnsqlite.flow.rdy import REASONS, rotation_bound

pytestmark = pytest.mark.no_server

DT = 0.05  # the simulation step, seconds


@dataclass
class Nsqd:
    rate: float  # messages per second published into it
    backlog: float = 0.0
    rdy: int = 0  # what the planner last sent
    #: Its messages delivered and not yet answered (a send time each): the one
    #: record of them, which the planner reads (as a consumer's link's
    #: unanswered set): added to before message_received, taken from before
    #: message_done.
    held: list[float] = field(default_factory=list)
    delivered: int = 0
    waiting_from: float | None = None  # has messages, none delivered since
    flow: LinkPlan | None = None  # the planner's record of it, kept as a link keeps it

    @property
    def in_flight(self) -> int:
        return len(self.held)


@dataclass
class Sim:
    planner: RdyPlanner
    interval: float
    service: float
    rng: random.Random
    now: float = 0.0
    nsqd: dict[str, Nsqd] = field(default_factory=dict)
    answers: list[tuple[float, str]] = field(default_factory=list)
    next_eval: float = 0.0
    longest_wait: float = 0.0
    joined: int = 0

    def send(self, commands: Sequence[tuple[str, int]]) -> None:
        for name, count in commands:
            # nsqd's RDY is a window: the same count again would change nothing.
            assert count != self.nsqd[name].rdy, f"RDY {count} sent again to {name}"
            self.nsqd[name].rdy = count

    def join(self, rate: float, max_rdy_count: int = 2500) -> str:
        name = f"n{self.joined}"
        self.joined += 1
        server = self.nsqd[name] = Nsqd(rate)
        self.send(self.planner.add(name, max_rdy_count, self.now, server.held))
        server.flow = self.planner.conns[name]
        return name

    def leave(self, name: str) -> None:
        server = self.nsqd.pop(name)
        self.answers = [(t, n) for t, n in self.answers if n != name]
        del server  # nsqd requeues what it had in flight to a closed client
        self.send(self.planner.remove(name, self.now))

    def reset_waits(self) -> None:
        """A disruption (join, leave, budget, backoff): wait clocks start again."""
        for server in self.nsqd.values():
            server.waiting_from = self.now if server.waiting_from is not None else None

    def step(self) -> None:
        self.now += DT
        due = [a for a in self.answers if a[0] <= self.now]
        self.answers = [a for a in self.answers if a[0] > self.now]
        for _, name in due:
            server = self.nsqd[name]
            server.held.pop(0)
            assert server.flow is not None
            self.send(self.planner.message_done(server.flow, self.now))
        if self.now >= self.next_eval - 1e-9:
            self.next_eval += self.interval  # periodic, as the timer wheel's call_every
            self.send(self.planner.redistribute(self.now))
        for name, server in list(self.nsqd.items()):
            server.backlog += server.rate * DT
            sent = False
            while server.backlog >= 1 and server.in_flight < server.rdy:
                server.backlog -= 1
                server.held.append(self.now)
                server.delivered += 1
                sent = True
                self.answers.append((self.now + self.service, name))
                assert server.flow is not None
                self.send(self.planner.message_received(server.flow, self.now))
                self.check()
            if sent or server.backlog < 1:
                server.waiting_from = None
            elif server.waiting_from is None:
                server.waiting_from = self.now
            else:
                self.longest_wait = max(self.longest_wait, self.now - server.waiting_from)
        self.check()

    def check(self) -> None:
        p = self.planner
        assert p.total_rdy <= p.max_in_flight
        for name, flow in p.conns.items():
            assert 0 <= flow.last_rdy <= flow.max_rdy_count
            assert flow.last_rdy == self.nsqd[name].rdy
            assert flow.held is self.nsqd[name].held  # one record, read by the planner
            assert flow.reason in REASONS
        held = sum(s.in_flight for s in self.nsqd.values())
        committed = sum(f.committed for f in p.conns.values())
        assert held <= committed or p.mode != p.FULL
        if p.mode == p.FULL:
            # What nsqd may hold in flight never exceeds max_in_flight because
            # of a grant: above it (the budget was lowered, backoff probed) it
            # only drains.
            assert committed <= max(p.max_in_flight, self.ceiling) + p.overdraft
            self.ceiling = committed if committed > p.max_in_flight else 0
        else:
            self.ceiling = max(self.ceiling, committed)
        if p.mode == p.FULL and not p.scarce and p.max_in_flight > 0:
            assert all(flow.target >= 1 for flow in p.conns.values())
        if p.mode == p.PAUSED:
            assert p.total_rdy == 0
        if p.mode == p.PROBING:
            assert p.total_rdy <= 1

    ceiling: int = 0  # what nsqd held beyond max_in_flight when the budget was lowered

    def run(self, seconds: float) -> None:
        end = self.now + seconds
        while self.now < end:
            self.step()


def wait_bound(sim: Sim, timeout: float) -> float:
    """The stated bound, plus the service time per round and one step of slack."""
    p = sim.planner
    n, m = len(p.conns), p.max_in_flight
    rounds = math.ceil((n - m) / m) if n > m else 0
    per_round = timeout + sim.interval + sim.service + DT
    return rounds * per_round + sim.interval + sim.service + 2 * DT


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    max_in_flight=st.integers(1, 40),
    conns=st.integers(1, 6),
    interval=st.sampled_from([0.2, 0.5, 1.0]),
    timeout=st.sampled_from([0.5, 1.0, 3.0]),
    service=st.sampled_from([0.0, 0.05, 0.3]),
)
def test_random_traffic_keeps_the_invariants_and_the_wait_bound(
    seed: int, max_in_flight: int, conns: int, interval: float, timeout: float, service: float
) -> None:
    rng = random.Random(seed)
    planner = RdyPlanner(
        max_in_flight,
        low_rdy_idle_timeout=rng.choice([0.3, 1.0, 5.0]),
        rng=random.Random(seed),
        low_rdy_timeout=timeout,
    )
    sim = Sim(planner, interval, service, rng)

    def rate() -> float:
        return rng.choice([0.0, 0.0, 2.0, 20.0, 200.0, 2000.0])

    for _ in range(conns):
        sim.join(rate(), rng.choice([2500, 2500, 3]))
    for _phase in range(6):
        # A disruption, then a stable stretch in which the wait bound must hold.
        action = rng.randrange(5)
        if action == 0 or not sim.nsqd:
            sim.join(rate(), rng.choice([2500, 5]))
        elif action == 1 and len(sim.nsqd) > 1:
            sim.leave(rng.choice(sorted(sim.nsqd)))
        elif action == 2:
            sim.ceiling = sum(f.committed for f in planner.conns.values())
            sim.send(planner.set_max_in_flight(rng.randint(1, 40), sim.now))
        elif action == 3:
            sim.send(planner.pause())
            sim.reset_waits()
            sim.run(rng.choice([0.1, 1.0]))
            sim.send(planner.probe())
            sim.run(rng.choice([0.1, 1.0]))
            sim.send(planner.resume(sim.now))
        for server in sim.nsqd.values():
            if rng.random() < 0.5:
                server.rate = rate()
        sim.reset_waits()
        sim.longest_wait = 0.0
        bound = wait_bound(sim, timeout)
        sim.run(max(3 * bound, 5.0))
        assert sim.longest_wait <= bound, (sim.longest_wait, bound, len(planner.conns))


def test_busy_connections_share_scarce_rdy_fairly_within_the_bound() -> None:
    """Issue 17's first case: max_in_flight=1, three nsqd with steady traffic."""
    planner = RdyPlanner(1, low_rdy_idle_timeout=2.0, rng=random.Random(3), low_rdy_timeout=2.0)
    sim = Sim(planner, interval=1.0, service=0.001, rng=random.Random(3))
    names = [sim.join(400.0) for _ in range(3)]
    sim.run(60.0)
    delivered = [sim.nsqd[n].delivered for n in names]
    fair = sum(delivered) / 3
    assert min(delivered) >= fair * 0.8, delivered
    assert sim.longest_wait <= rotation_bound(3, 1, 2.0, 1.0) + 2 * DT
    assert {planner.conns[n].reason for n in names} == {"rotation", "waiting"}


def test_the_busy_nsqd_gets_the_budget_the_idle_ones_leave() -> None:
    """Issue 17's second case: max_in_flight=30, one nsqd of three has messages."""
    planner = RdyPlanner(30, rng=random.Random(1))
    sim = Sim(planner, interval=0.5, service=0.01, rng=random.Random(1))
    busy, idle1, idle2 = sim.join(1e5), sim.join(0.0), sim.join(0.0)
    sim.run(0.2)
    assert planner.conns[busy].last_rdy == 10  # the others' shares are kept for them at first
    sim.run(1.0)  # two evaluations
    flows = planner.conns
    assert (flows[busy].last_rdy, flows[busy].reason) == (28, "demand")
    assert [(flows[n].last_rdy, flows[n].reason) for n in (idle1, idle2)] == [(1, "idle")] * 2
    assert sum(s.in_flight for s in sim.nsqd.values()) == 28
    # The idle one wakes up: its share is back one evaluation later.
    sim.nsqd[idle1].rate = 1e5
    sim.run(0.5 + 2 * DT)
    assert sorted([flows[idle1].last_rdy, flows[busy].last_rdy]) == [14, 15]
    assert {flows[idle1].reason, flows[busy].reason} == {"demand"}


def test_equal_backlogs_get_even_shares_and_the_whole_budget() -> None:
    planner = RdyPlanner(100, rng=random.Random(2))
    sim = Sim(planner, interval=0.5, service=0.05, rng=random.Random(2))
    names = [sim.join(1e5) for _ in range(3)]
    for _ in range(40):
        sim.run(0.25)
        assert sum(s.in_flight for s in sim.nsqd.values()) <= 100
    assert sorted(planner.conns[n].last_rdy for n in names) == [33, 33, 34]
    assert {planner.conns[n].reason for n in names} == {"even"}
    assert sum(s.in_flight for s in sim.nsqd.values()) == 100


def test_light_traffic_spreads_the_spare_budget() -> None:
    planner = RdyPlanner(30, rng=random.Random(4))
    sim = Sim(planner, interval=0.5, service=0.01, rng=random.Random(4))
    names = [sim.join(20.0) for _ in range(3)]
    sim.run(5.0)
    assert sorted(planner.conns[n].last_rdy for n in names) == [10, 10, 10]
    assert all(planner.conns[n].reason == "even" for n in names)


# -- the default options (issue 27): no tuning ---------------------------------

DEFAULTS = ConsumerConfig()
INTERVAL = DEFAULTS.rdy_redistribute_interval


def default_planner(max_in_flight: int, seed: int) -> RdyPlanner:
    return RdyPlanner(
        max_in_flight,
        low_rdy_idle_timeout=DEFAULTS.low_rdy_idle_timeout,
        rng=random.Random(seed),
        low_rdy_timeout=DEFAULTS.low_rdy_timeout,
    )


def known_bound(sim: Sim) -> float:
    """rotation_bound() with the defaults, plus, per round, the giver's answer and a step."""
    p = sim.planner
    n, m = len(p.conns), p.max_in_flight
    rounds = math.ceil((n - m) / m) if n > m else 0
    stated = rotation_bound(n, m, DEFAULTS.low_rdy_timeout, INTERVAL)
    return stated + (rounds + 1) * (sim.service + DT) + DT


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    max_in_flight=st.integers(1, 8),
    conns=st.integers(2, 6),
    service=st.sampled_from([0.0, 0.05, 0.3]),
)
def test_default_options_serve_every_nsqd_with_messages_within_the_stated_bound(
    seed: int, max_in_flight: int, conns: int, service: float
) -> None:
    """Steady traffic everywhere: every connection is known to have messages."""
    rng = random.Random(seed)
    sim = Sim(default_planner(max_in_flight, seed), INTERVAL, service, rng)
    sim.next_eval = INTERVAL  # the consumer's timer first fires an interval after start

    def rate() -> float:
        return rng.choice([20.0, 200.0, 2000.0])

    for _ in range(conns):
        sim.join(rate(), rng.choice([2500, 2500, 3]))
    for _phase in range(4):
        action = rng.randrange(4)
        if action == 0:
            sim.join(rate())
        elif action == 1 and len(sim.nsqd) > 2:
            sim.leave(rng.choice(sorted(sim.nsqd)))
        elif action == 2:
            sim.ceiling = sum(f.committed for f in sim.planner.conns.values())
            sim.send(sim.planner.set_max_in_flight(rng.randint(1, 8), sim.now))
        sim.reset_waits()
        sim.longest_wait = 0.0
        bound = known_bound(sim)
        sim.run(max(3 * bound, 6.0))
        assert sim.longest_wait <= bound, (sim.longest_wait, bound, len(sim.planner.conns))


def test_default_options_share_scarce_rdy_within_seconds() -> None:
    """Issue 27's first case with the defaults: max_in_flight=1, three busy nsqd, 60 s."""
    planner = default_planner(1, 3)
    sim = Sim(planner, INTERVAL, service=0.001, rng=random.Random(3))
    names = [sim.join(400.0) for _ in range(3)]
    sim.run(60.0)
    delivered = [sim.nsqd[n].delivered for n in names]
    fair = sum(delivered) / 3
    assert min(delivered) >= fair * 0.8, delivered  # the target is a third; the turns are even
    bound = rotation_bound(3, 1, DEFAULTS.low_rdy_timeout, INTERVAL)
    assert bound <= 5.0
    assert sim.longest_wait <= bound + 2 * DT, (sim.longest_wait, bound)


def test_default_options_give_the_busy_nsqd_its_budget_by_second_three() -> None:
    """Issue 27's second case with the defaults: one busy nsqd of three, max_in_flight=30."""
    planner = default_planner(30, 1)
    sim = Sim(planner, INTERVAL, service=0.01, rng=random.Random(1))
    sim.next_eval = INTERVAL  # the consumer's timer first fires an interval after start
    busy, *idle = sim.join(1e5), sim.join(0.0), sim.join(0.0)
    for name in idle:
        sim.nsqd[name].backlog = 1.0  # one message each: known, then empty
    sim.run(3.0)
    flows = planner.conns
    assert (flows[busy].last_rdy, flows[busy].reason) == (28, "demand")
    assert sim.nsqd[busy].in_flight == 28
    assert [(flows[n].last_rdy, flows[n].reason) for n in idle] == [(1, "idle")] * 2


def test_default_options_follow_traffic_that_moves_within_three_seconds() -> None:
    planner = default_planner(30, 5)
    sim = Sim(planner, INTERVAL, service=0.01, rng=random.Random(5))
    first, second, third = sim.join(1e5), sim.join(0.0), sim.join(0.0)
    sim.run(5.3)
    assert planner.conns[first].last_rdy == 28
    sim.nsqd[first].rate, sim.nsqd[first].backlog = 0.0, 0.0  # the move
    sim.nsqd[second].rate = 1e5
    sim.run(3.0)
    flows = planner.conns
    assert (flows[second].last_rdy, flows[second].reason) == (28, "demand")
    assert sim.nsqd[second].in_flight == 28
    assert [flows[n].last_rdy for n in (first, third)] == [1, 1]
