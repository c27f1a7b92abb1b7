"""The RDY policy, driven with a fake clock: no sockets, no gevent."""

from __future__ import annotations

import random
from collections.abc import Sized

import pytest

from gnsqlite.config import ConsumerConfig
from gnsqlite.flow import RdyPlanner
from gnsqlite.flow.link_plan import Command
from gnsqlite.flow.rdy import rotation_bound

pytestmark = pytest.mark.no_server


class Planner(RdyPlanner):
    """The planner as a consumer's links drive it: each connection's in-flight
    count is the size of a list owned here (a link's ``unanswered`` set), which
    gets a message before ``message_received`` and loses one before ``message_done``.
    The planner itself only reads the lists."""

    held: dict[str, list[object]]

    def add(self, name: str, max_rdy_count: int, now: float, held: Sized = ()) -> list[Command]:
        self.held = getattr(self, "held", {})
        self.held[name] = []
        return super().add(name, max_rdy_count, now, self.held[name])

    # The tests name connections; a link holds its record (what add() made).
    def message_received(self, name: str, now: float) -> list[Command]:  # type: ignore[override]
        flow = self.conns.get(name)
        if flow is None:
            return []
        self.held[name].append(object())
        return list(super().message_received(flow, now))

    def message_done(self, name: str, now: float | None = None) -> list[Command]:  # type: ignore[override]
        flow = self.conns.get(name)
        if flow is None or not self.held[name]:
            return []  # nothing in flight: nothing to answer
        self.held[name].pop()
        return list(super().message_done(flow, now))


def planner(max_in_flight: int, idle: float = 10.0, busy: float = 30.0) -> Planner:
    return Planner(
        max_in_flight, low_rdy_idle_timeout=idle, rng=random.Random(7), low_rdy_timeout=busy
    )


def assert_within_budget(p: RdyPlanner) -> None:
    assert p.total_rdy <= p.max_in_flight
    for flow in p.conns.values():
        assert 0 <= flow.last_rdy <= flow.max_rdy_count


def test_new_connection_starts_at_one_then_gets_its_share() -> None:
    p = planner(100)
    assert p.add("a", 2500, now=0.0) == [("a", 1)]
    assert p.message_received("a", now=1.0) == [("a", 100)]
    assert p.add("b", 2500, now=2.0) == [("a", 50), ("b", 1)]
    assert_within_budget(p)
    # a had RDY 100: until it answers, or the next evaluation, nsqd may have
    # sent it up to 100, so b's share waits (its RDY 1 never does).
    assert p.message_received("b", now=3.0) == []
    assert p.conns["a"].committed == 100
    assert p.redistribute(4.0) == [("b", 50)]
    assert_within_budget(p)


def test_a_record_kept_by_its_link_is_inactive_once_its_connection_is_removed() -> None:
    # A link keeps the record add() made and hands it back on every message and
    # answer; after remove() a late answer or message changes nothing.
    p = RdyPlanner(2, rng=random.Random(7))
    held_a: list[object] = []
    held_b: list[object] = []
    p.add("a", 2500, 0.0, held_a)
    p.add("b", 2500, 0.0, held_b)
    a = p.conns["a"]
    held_a.append(object())
    p.message_received(a, 0.1)
    assert a.active and "a" in p.starved_names  # in-flight 1 on RDY 1
    p.remove("a", 0.2)
    assert not a.active and "a" not in p.conns
    held_a.pop()
    assert not p.message_done(a, 0.3)
    held_a.append(object())
    assert not p.message_received(a, 0.4)
    assert "a" not in p.starved_names and "a" not in p.conns


def test_sum_never_exceeds_max_in_flight_with_uneven_division() -> None:
    p = planner(10)
    for name in "abc":
        p.add(name, 2500, now=0.0)
        p.message_received(name, now=0.0)
        assert_within_budget(p)
    p.redistribute(1.0)
    assert sorted(f.last_rdy for f in p.conns.values()) == [3, 3, 4]  # the remainder is used


def test_max_rdy_count_is_never_exceeded() -> None:
    p = planner(5000)
    p.add("a", 200, now=0.0)
    assert p.message_received("a", now=0.0) == [("a", 200)]


def test_an_unchanged_rdy_is_never_sent_again() -> None:
    # nsqd's RDY is a window (it sends while in flight < RDY): answering
    # reopens it, so sending the same count again would change nothing.
    p = planner(8)
    p.add("a", 2500, now=0.0)
    p.message_received("a", now=0.0)  # the first message opens RDY 8
    assert [p.message_received("a", now=0.0) for _ in range(7)] == [[]] * 7
    assert p.conns["a"].rdy == 0  # the window is full
    assert [p.message_done("a") for _ in range(8)] == [[]] * 8
    assert p.conns["a"].rdy == 8  # and open again, with no RDY sent
    for _ in range(100):
        assert p.message_received("a", now=0.1) == []
        assert p.message_done("a", now=0.1) == []


def test_rdy_one_is_sent_once_at_max_in_flight_one_and_while_probing() -> None:
    p = planner(1)
    assert p.add("a", 2500, now=0.0) == [("a", 1)]
    for _ in range(5):
        assert p.message_received("a", now=0.0) == []
        assert p.message_done("a") == []
    assert p.pause() == [("a", 0)]
    assert p.probe() == [("a", 1)]
    p.message_received("a", now=0.0)
    assert p.message_done("a") == []
    assert p.resume(now=0.0) == []  # nsqd has RDY 1 already: the full flow needs no command


def test_a_changed_rdy_is_still_sent_when_an_answer_frees_budget() -> None:
    # a held RDY 100 when b joined: a is lowered at once, and b's share above
    # its RDY 1 waits for what nsqd may still send a; a's answers free it.
    p = planner(100)
    p.add("a", 2500, now=0.0)
    for _ in range(40):
        p.message_received("a", now=0.0)
    assert p.add("b", 2500, now=0.1) == [("a", 50), ("b", 1)]
    assert p.message_received("b", now=0.2) == []
    sent = [c for _ in range(40) for c in p.message_done("a", now=0.3)]
    # Handed on in steps of a quarter of b's target (50), never the same count twice.
    assert sent == [("b", 14), ("b", 27), ("b", 40)]
    assert_within_budget(p)


def test_removing_a_connection_frees_its_rdy_for_the_others() -> None:
    p = planner(10)
    for name in "ab":
        p.add(name, 2500, now=0.0)
        p.message_received(name, now=0.0)
    assert p.remove("b") == [("a", 10)]


def test_scarce_rdy_rotates_from_idle_connections_to_all_of_them() -> None:
    p = planner(1, idle=5.0)
    for name in "abc":
        p.add(name, 2500, now=0.0)
    assert p.total_rdy == 1
    holders_seen = {name for name, f in p.conns.items() if f.last_rdy}
    now = 0.0
    for _ in range(20):
        now += 6.0
        out = p.redistribute(now)
        assert_within_budget(p)
        assert [c for _, c in out].count(1) == 1
        holders_seen |= {name for name, f in p.conns.items() if f.last_rdy}
    assert holders_seen == {"a", "b", "c"}


def test_handing_over_scarce_rdy_restarts_the_idle_clock_not_the_last_message() -> None:
    p = planner(1, idle=5.0)
    p.add("a", 2500, now=0.0)
    p.message_received("a", now=1.0)
    p.message_done("a")
    p.add("b", 2500, now=2.0)
    assert p.redistribute(7.0) == [("a", 0), ("b", 1)]
    b = p.conns["b"]
    assert (b.last_message_at, b.idle_since()) == (None, 7.0)
    assert p.conns["a"].last_message_at == 1.0
    assert p.redistribute(11.0) == []  # b's clock started at the hand-over


def test_a_busy_connection_keeps_its_scarce_rdy_while_the_others_found_nothing() -> None:
    p = planner(1, idle=5.0)
    for name in "abc":
        p.add(name, 2500, now=0.0)
    # b and c were never tried (presumed to have messages): one evaluation each.
    assert p.redistribute(1.0) == [("a", 0), ("b", 1)]
    assert p.redistribute(2.0) == [("b", 0), ("c", 1)]
    assert not p.conns["a"].eager and not p.conns["b"].eager  # they found nothing
    for second in range(3, 20):
        p.message_received("c", now=second - 0.5)  # c is busy
        p.message_done("c", now=second - 0.4)
        assert p.redistribute(float(second)) == []
    assert [p.conns[n].reason for n in "abc"] == ["waiting", "waiting", "rotation"]


def test_a_turn_lasts_one_evaluation_while_a_connection_known_to_have_messages_waits() -> None:
    p = planner(1, idle=10.0, busy=30.0)  # the defaults
    for name in "abc":
        p.add(name, 2500, now=0.0)
    order = ["a"]
    for second in range(1, 10):
        holder = order[-1]
        p.message_received(holder, now=second - 0.5)  # every holder finds messages
        p.message_done(holder, now=second - 0.4)
        out = p.redistribute(float(second))
        assert out == [(holder, 0), (out[1][0], 1)]  # the turn passes at every evaluation
        order.append(out[1][0])
        assert p.conns[holder].eager
    assert order == ["a", "b", "c"] * 3 + ["a"]


def test_backoff_modes_pause_probe_resume() -> None:
    p = planner(6)
    for name in "ab":
        p.add(name, 2500, now=0.0)
        p.message_received(name, now=0.0)
    assert p.pause() == [("a", 0), ("b", 0)]
    probe = p.probe()
    assert len(probe) == 1 and probe[0][1] == 1
    assert_within_budget(p)
    p.resume()
    assert_within_budget(p)
    p.redistribute(1.0)
    assert sorted(f.last_rdy for f in p.conns.values()) == [3, 3]
    assert p.total_rdy == 6


def test_set_max_in_flight_zero_pauses_and_back() -> None:
    p = planner(4)
    p.add("a", 2500, now=0.0)
    p.message_received("a", now=0.0)
    assert p.set_max_in_flight(0) == [("a", 0)]
    assert p.set_max_in_flight(4) == [("a", 4)]


@pytest.mark.parametrize("in_flight,starved", [(0, False), (8, False), (9, True), (10, True)])
def test_starvation_is_85_percent_of_last_rdy(in_flight: int, starved: bool) -> None:
    p = planner(10)
    p.add("a", 2500, now=0.0)
    for _ in range(in_flight):
        p.message_received("a", now=0.0)
    assert p.conns["a"].last_rdy == (10 if in_flight else 1)
    assert p.is_starved() is starved
    if starved:
        p.message_done("a")
        p.message_done("a")
        assert not p.is_starved()


def test_random_walk_keeps_the_invariants() -> None:
    rng = random.Random(1)
    p = Planner(rng.randint(1, 50), low_rdy_idle_timeout=1.0, rng=random.Random(2))
    names: list[str] = []
    now = 0.0
    for step in range(2000):
        now += rng.random()
        action = rng.randrange(7)
        if action == 0 or not names:
            name = f"c{step}"
            names.append(name)
            p.add(name, rng.choice([1, 3, 2500]), now)
        elif action == 1 and names:
            p.remove(names.pop(rng.randrange(len(names))))
        elif action == 2:
            p.set_max_in_flight(rng.randint(0, 50))
        elif action == 3:
            p.redistribute(now)
        elif action == 4:
            rng.choice([p.pause, p.probe, p.resume])()
        else:
            name = rng.choice(names)
            if p.conns[name].last_rdy > p.conns[name].in_flight:
                p.message_received(name, now)
            else:
                p.message_done(name)
        assert_within_budget(p)
        assert p.is_starved() == any(f.starved for f in p.conns.values())


def test_a_busy_connection_gives_scarce_rdy_up_after_low_rdy_timeout() -> None:
    p = planner(1, idle=5.0, busy=3.0)
    for name in "abc":
        p.add(name, 2500, now=0.0)
    assert [(n, f.last_rdy, f.reason) for n, f in p.conns.items()] == [
        ("a", 1, "rotation"),
        ("b", 0, "waiting"),
        ("c", 0, "waiting"),
    ]
    # Never tried, b and c get short turns; they find nothing, so c keeps it then.
    p.redistribute(1.0)
    p.redistribute(2.0)
    handed: list[tuple[float, str]] = []
    now = 2.0
    for _ in range(10):
        now += 1.0
        holder = next(n for n, f in p.conns.items() if f.target)
        p.message_received(holder, now - 0.5)  # the holder is busy
        p.message_done(holder, now - 0.4)
        handed += [(now, name) for name, count in p.redistribute(now) if count]
        assert_within_budget(p)
    # c's turn lasts low_rdy_timeout (3 s, within half an interval); then c,
    # known to have messages, waits, so the turns are short: first come, first served.
    assert handed[:3] == [(5.0, "a"), (6.0, "b"), (7.0, "c")]


def test_scarce_rdy_waits_for_the_giver_to_answer_what_it_holds() -> None:
    p = planner(1, busy=1.0)
    p.add("a", 2500, now=0.0)
    p.add("b", 2500, now=0.0)
    p.message_received("a", now=0.5)
    assert p.redistribute(2.0) == [("a", 0)]  # b's turn, but a still holds a message
    assert p.conns["b"].reason == "rotation"
    assert p.message_done("a", now=2.1) == [("b", 1)]


def test_a_lowered_share_is_handed_on_as_its_messages_are_answered() -> None:
    p = planner(8)
    p.add("a", 2500, now=0.0)
    for _ in range(8):
        p.message_received("a", now=0.0)  # a: RDY 8, 8 in flight
    # b's share is kept for it; its RDY 1 waits until a has answered one.
    assert p.add("b", 2500, now=0.1) == [("a", 4)]
    assert (p.conns["b"].target, p.conns["b"].last_rdy, p.conns["b"].reason) == (1, 0, "new")
    assert p.message_done("a", now=0.2) == [("b", 1)]
    assert p.message_received("b", now=0.3) == []  # b opens its share as a answers
    assert p.conns["b"].target == 4
    answers = [p.message_done("a", now=0.4) for _ in range(4)]
    assert answers == [[("b", 2)], [("b", 3)], [("b", 4)], []]
    assert_within_budget(p)
    assert sum(f.in_flight for f in p.conns.values()) <= 8


@pytest.mark.parametrize(
    "mode,reason", [("pause", "backoff"), ("probe", "probe"), ("resume", "even")]
)
def test_every_count_says_why(mode: str, reason: str) -> None:
    p = planner(4)
    p.add("a", 2500, now=0.0)
    p.message_received("a", now=0.0)
    getattr(p, mode)()
    assert p.conns["a"].reason == reason
    p.set_max_in_flight(0)
    assert p.conns["a"].reason == ("backoff" if mode == "pause" else "paused")


def test_rotation_bound() -> None:
    # Known to have messages: two turns of one interval (+0.5) s before the third.
    assert rotation_bound(3, 1, 2.0, 1.0) == 3.0
    assert rotation_bound(3, 1, 2.0, 1.0, known=False) == 5.0  # two busy timeouts
    assert rotation_bound(3, 1, 0.5, 1.0) == 2.0  # a busy timeout below the interval
    assert rotation_bound(5, 2, 10.0, 5.0) == 15.0
    assert rotation_bound(5, 2, 10.0, 5.0, known=False) == 25.0
    assert rotation_bound(3, 3, 2.0, 1.0) == 0.0
    defaults = ConsumerConfig()
    assert rotation_bound(3, 1, defaults.low_rdy_timeout, defaults.rdy_redistribute_interval) <= 5


def test_the_planner_defaults_are_the_consumer_defaults() -> None:
    defaults, p = ConsumerConfig(), RdyPlanner(1)
    assert (p.low_rdy_idle_timeout, p.low_rdy_timeout) == (
        defaults.low_rdy_idle_timeout,
        defaults.low_rdy_timeout,
    )


def test_demand_moves_at_the_first_evaluation_from_the_start() -> None:
    """One busy connection of three: the larger share at the first evaluation."""
    p = planner(30)
    for name in "abc":
        p.add(name, 2500, now=0.0)
    for name in "abc":  # one message each on RDY 1: the others have nothing more
        p.message_received(name, now=0.1)
        p.message_done(name, now=0.11)
    assert sorted(f.last_rdy for f in p.conns.values()) == [10, 10, 10]
    for _ in range(9):
        p.message_received("a", now=0.5)  # a uses its share fully
    p.redistribute(1.0)
    assert [(p.conns[n].target, p.conns[n].reason) for n in "abc"] == [
        (28, "demand"),
        (1, "idle"),
        (1, "idle"),
    ]
    for _ in range(9):
        p.message_done("a", now=1.5)
        p.message_received("a", now=1.5)
    # What nsqd might still have sent b and c is counted until the next evaluation.
    p.redistribute(2.0)
    assert p.conns["a"].last_rdy == 28
    assert_within_budget(p)


def test_a_connection_that_dried_up_gives_its_budget_at_the_next_evaluation() -> None:
    p = planner(30)
    for name in "ab":
        p.add(name, 2500, now=0.0)
        p.message_received(name, now=0.0)
        p.message_done(name, now=0.0)
    now = 0.0
    for _ in range(3):  # a is busy, b idle
        now += 1.0
        full = p.conns["a"].last_rdy
        for _ in range(full):
            p.message_received("a", now - 0.5)
        for _ in range(full):
            p.message_done("a", now - 0.4)
        p.message_received("a", now - 0.1)  # and it still receives
        p.message_done("a", now - 0.05)
        p.redistribute(now)
    assert (p.conns["a"].last_rdy, p.conns["b"].last_rdy) == (29, 1)
    # The traffic moves: a has nothing from 3.1 on, b starts at 3.2 and uses its RDY 1.
    p.message_received("a", 3.1)
    p.message_done("a", 3.1)
    p.message_received("b", 3.2)
    p.redistribute(4.0)  # a got nothing for the last half interval: it has dried up
    assert [(p.conns[n].target, p.conns[n].reason) for n in "ab"] == [(1, "idle"), (29, "demand")]


def test_connections_on_their_way_keep_their_shares_free() -> None:
    p = planner(99)
    p.set_connecting(3)
    p.add("a", 2500, now=0.0)
    p.set_connecting(2)
    assert p.message_received("a", now=0.1) == [("a", 33)]  # not 99, to give back later
    p.connecting = 1  # as the Consumer does when a connection subscribed: add() follows
    p.add("b", 2500, now=0.2)  # b holds RDY 1 and its share in reserve until it receives
    assert p.conns["a"].last_rdy == 33
    out = p.set_connecting(0, now=0.3)  # the third failed: its share is shared out
    assert out == [("a", p.conns["a"].target)] and p.conns["a"].target in (49, 50)
    assert p.conns["a"].reserve == 0  # nothing was lowered, so nothing is held in reserve
    assert_within_budget(p)
