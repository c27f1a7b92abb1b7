"""benchmarks/scale.py's summary and verdicts, from hand-made runs (no run, no server)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from test_bench_compare import load_benchmark

pytestmark = pytest.mark.no_server


@pytest.fixture(scope="module")
def scale() -> ModuleType:
    return load_benchmark("scale")


def consume(steady_us: float) -> dict[str, Any]:
    """One consume run of 200,000 messages whose steady part cost ``steady_us`` per message."""
    return {
        "messages": 200_000,
        "seconds": 1.0,
        "cpu": 200_000 * steady_us * 1e-6,
        "steady_messages": 180_000,
        "steady_cpu": 180_000 * steady_us * 1e-6,
        "steady_seconds": 0.9,
        "rss_growth": 2**20,
        "rdy_passes": 0,
        "rdy_pass_us": None,
    }


def idle(rss: float, wheel_us: float) -> dict[str, Any]:
    return {
        "rss_per_connection": rss,
        "cpu_per_connection_second": 25e-6,
        "wheel_cpu_per_connection_second": wheel_us * 1e-6,
        "heartbeats_per_connection_second": 1.0,
        "timers_fired_per_connection_second": 0.0,
    }


def report(at_50: list[float], wheel_us: float) -> dict[str, Any]:
    return {
        "broker": "real nsqd",
        "connections": {
            1: [consume(2.0)] * 5,
            50: [consume(us) for us in at_50],
        },
        "consumers": {},
        "idle": {1000: [idle(24 * 1024, wheel_us)] * 5},
        "rdy": {"50": [{"links": 50, "rdy_pass_us": 80.0}]},
    }


def test_the_connections_target_is_judged_on_the_medians(scale: ModuleType) -> None:
    lines = scale.summarise(report([2.3, 2.4, 9.0, 2.2, 2.1], wheel_us=1.3))
    assert "CPU per message at 50 connections / at 1: 1.15x (met: <= 1.2x)" in lines
    lines = scale.summarise(report([2.5, 2.5, 2.5, 2.2, 2.1], wheel_us=1.3))
    assert "CPU per message at 50 connections / at 1: 1.25x (NOT met: <= 1.2x)" in lines


def test_the_connections_ratio_is_split_into_batches_and_connections(scale: ModuleType) -> None:
    # One connection at the RDY each of 50 holds costs 2.4 µs: the batches' factor is
    # 1.2x; the 50 connections at that RDY cost 2.5 µs, 1.04x more: 1.25x in all.
    runs = report([2.5] * 5, wheel_us=1.3)
    runs["same_rdy"] = {50: [{**consume(2.4), "steady_wakeups": 3_600}] * 5}
    lines = scale.summarise(runs)
    assert "CPU per message at 50 connections / at 1: 1.25x (NOT met: <= 1.2x)" in lines
    assert (
        "  = 1.20x for the smaller batches (1 connection at the RDY each of 50 holds / at 1)"
        " times 1.04x for the connections themselves (50 / 1 at that RDY each)"
    ) in lines
    row = next(line for line in lines if "RDY as each of 50" in line)
    assert row.split(" | ")[3:6] == ["2.40", "0.00", "20.0"]  # CPU, kernel, wake-ups per 1k


def test_the_idle_bounds_are_printed_with_their_verdicts(scale: ModuleType) -> None:
    met = next(line for line in scale.summarise(report([2.0], 1.3)) if "idle" in line)
    assert "RSS 24.0 KiB per connection (met: <= 32 KiB)" in met
    assert "of which the timer wheel 1.30 µs (met: <= 2 µs)" in met
    late = next(line for line in scale.summarise(report([2.0], 7.6)) if "idle" in line)
    assert "timer wheel 7.60 µs (NOT met: <= 2 µs)" in late


def test_the_instructions_table_gives_the_ratio_to_one_connection(scale: ModuleType) -> None:
    lines = scale.summarise(
        {"broker": "real nsqd", "instructions": {"1": [24_000.0] * 3, "50": [26_400.0] * 3}}
    )
    assert "| 1 consumer, 50 connections | 3 | 26,400 | 1.10x |" in lines
    assert lines[-1].endswith(
        "instructions per message at 50 connections / at 1: 1.10x (met: <= 1.2x)"
    )
    grown = {"broker": "real nsqd", "instructions": {"1": [24_000.0], "50": [30_000.0]}}
    assert scale.summarise(grown)[-1].endswith("1.25x (NOT met: <= 1.2x)")


def go_run(messages: int, cpu: float) -> dict[str, Any]:
    """What compare.run_go_bench reads of one bench_reader run of 2 s."""
    return {"seconds": 2.0, "messages": messages, "cpu": cpu, "sys_cpu": cpu / 2, "wakeups": 40}


def test_the_go_reference_has_its_own_ratio_beside_gnsqlite_s(scale: ModuleType) -> None:
    # go-nsq: 2.0 µs a message over one connection, 2.2 over 50 (1.10x); gnsqlite's
    # 50 connections cost 2.5 µs, 1.14x go-nsq's there, and its one 2.0, 1.00x.
    runs = report([2.5] * 5, wheel_us=1.3)
    runs["go"] = {
        1: [scale.go_result(go_run(400_000, 0.8), queued=1_000_000)] * 5,
        50: [scale.go_result(go_run(400_000, 0.88), queued=1_000_000)] * 5,
    }
    lines = scale.summarise(runs)
    assert (
        "go-nsq's bench_reader, CPU per message at 50 connections / at 1: 1.10x (one nsqd);"
        " at 50 connections gnsqlite's CPU per message is 1.14x go-nsq's, at 1 1.00x"
    ) in lines
    row = next(line for line in lines if "bench_reader, 50 connections" in line)
    # rate, CPU, kernel, wake-ups per 1k; no RSS or RDY passes of its own
    assert row.split(" | ")[2:6] == ["200,000", "2.20", "1.10", "0.1"]
    assert row.endswith(" | - | - (-) |")


def test_a_go_run_that_drained_the_topic_is_marked_a_lower_bound(scale: ModuleType) -> None:
    runs = report([2.5] * 5, wheel_us=1.3)
    drained = scale.go_result(go_run(1_000_000, 2.0), queued=1_000_000)
    runs["go"] = {1: [drained, scale.go_result(go_run(400_000, 0.8), queued=1_000_000)]}
    row = next(line for line in scale.summarise(runs) if "bench_reader, 1 connections" in line)
    assert "(drained the topic in 1: a lower bound)" in row
