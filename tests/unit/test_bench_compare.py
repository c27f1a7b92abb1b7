"""benchmarks/compare.py's ratios and main table, from hand-made cells (no run, no server)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

pytestmark = pytest.mark.no_server

_BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module (a script beside the others, in no package)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", _BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def compare() -> ModuleType:
    return load_benchmark("compare")


def cell(rate: float, cpu_us: float, runs: int = 5) -> dict[str, Any]:
    """A summarised cell: medians of ``runs`` runs (five: enough to judge a target on)."""
    return {
        "good_runs": runs,
        "median": rate,
        "min": rate,
        "max": rate,
        "cpu_us_per_msg": cpu_us,
        "client_cpu_share": 0.5,
        "nsqd_cpu_us_per_msg": 1.0,
        "runs": [],
    }


def test_cpu_ratios_are_gnsqlite_over_the_best_peer_and_go(compare: ModuleType) -> None:
    r = compare.ratios(
        {
            "gnsqlite": cell(200_000, 4.5),
            "pynsq": cell(30_000, 22.5),
            "gnsq": cell(20_000, 9.0),  # lower CPU, but not the best peer by rate
            "go": cell(500_000, 1.5),
        }
    )
    assert r["best_peer"] == "pynsq"
    assert r["vs_best_peer"] == pytest.approx(200 / 30)
    assert r["vs_go"] == pytest.approx(0.4)
    assert r["cpu_vs_best_peer"] == pytest.approx(0.2)
    assert r["cpu_vs_go"] == pytest.approx(3.0)


def test_no_cpu_ratio_where_go_has_no_row_or_a_cell_failed(compare: ModuleType) -> None:
    r = compare.ratios({"gnsqlite": cell(8_000, 58.5), "gnsq": cell(8_300, 87.5)})
    assert r["vs_go"] is None and r["cpu_vs_go"] is None
    assert r["cpu_vs_best_peer"] == pytest.approx(58.5 / 87.5)
    failed = compare.ratios({"gnsqlite": {"error": "timeout", "runs": []}, "go": cell(1, 1.0)})
    assert failed["cpu_vs_go"] is None and failed["vs_go"] is None


def report(compare: ModuleType) -> dict[str, Any]:
    cells = {
        "gnsqlite": cell(214_352, 4.54),
        "pynsq": cell(28_139, 22.0),
        "go": cell(534_410, 1.26),
    }
    return {
        "clients": ["gnsqlite", "pynsq", "go"],
        "rows": {"consume_2500": {"cells": cells, "ratios": {}, "met": ""}},
    }


def test_the_table_shows_rate_and_cpu_ratios(compare: ModuleType) -> None:
    lines = compare.rate_table(compare.rederive(report(compare)))
    assert lines[0].endswith(
        "| vs best peer | vs go | CPU/msg vs best peer | CPU/msg vs go | target |"
    )
    assert len(lines[1].split("|")) == len(lines[0].split("|"))
    row = [c.strip() for c in lines[2].split("|")[1:-1]]
    assert row[0] == "consume, max_in_flight 2500"
    assert row[4:9] == [
        "7.62x (pynsq)",
        "0.40x",
        "0.21x (pynsq)",
        "3.60x",
        "NOT met (>= 0.5x go), NOT met (CPU <= 2.5x go's)",
    ]


def test_a_cpu_target_is_a_ceiling_on_the_ratio_to_the_named_client(compare: ModuleType) -> None:
    consume_1 = next(r for r in compare.ROWS if r.key == "consume_1")
    cells = {"gnsqlite": cell(11_000, 40.0), "gnsq": cell(8_300, 87.5)}
    assert compare._met(consume_1, compare.ratios(cells), cells) == (
        "met (>= 1.3x peer), met (CPU <= 0.5x gnsq's)"
    )
    cells["gnsqlite"] = cell(11_000, 44.0)  # 0.503x gnsq's CPU
    assert compare._met(consume_1, compare.ratios(cells), cells) == (
        "met (>= 1.3x peer), NOT met (CPU <= 0.5x gnsq's)"
    )
    del cells["gnsq"]
    assert compare._met(consume_1, compare.ratios(cells), cells) == "peer n/a, CPU vs gnsq n/a"


def test_tables_from_an_older_report_get_the_cpu_ratios(
    compare: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = report(compare)
    old.update(broker="real nsqd", repeat=1, floors=[])
    path = tmp_path / "compare.json"
    path.write_text(json.dumps(old))  # ratios written without the CPU keys
    assert compare.main(["--tables-from", str(path)]) == 0
    assert "| 0.21x (pynsq) | 3.60x |" in capsys.readouterr().out


def test_a_target_is_judged_on_five_runs_at_least(compare: ModuleType) -> None:
    consume_1 = next(r for r in compare.ROWS if r.key == "consume_1")
    cells = {"gnsqlite": cell(11_000, 40.0, runs=3), "gnsq": cell(8_300, 87.5)}
    assert compare._met(consume_1, compare.ratios(cells), cells) == (
        "peer n/a (3 runs < 5), CPU vs gnsq n/a (3 runs < 5)"
    )


def test_a_rate_target_is_stated_on_client_cpu_per_message_too(compare: ModuleType) -> None:
    # consume_1 wants 1.3x the best peer's rate: on CPU, at most 1/1.3 of its CPU
    # per message. Its own CPU target names gnsq; pynsq is the best peer here.
    consume_1 = next(r for r in compare.ROWS if r.key == "consume_1")
    cells = {
        "gnsqlite": cell(11_000, 40.0),
        "pynsq": cell(8_400, 50.0),  # 0.80x its CPU: above 0.77x
        "gnsq": cell(8_300, 87.5),
    }
    assert compare._met(consume_1, compare.ratios(cells), cells) == (
        "met (>= 1.3x peer), met (CPU <= 0.5x gnsq's), NOT met (CPU <= 0.77x pynsq's)"
    )


def test_the_table_puts_nsqds_cpu_per_message_beside_each_clients(compare: ModuleType) -> None:
    lines = compare.rate_table(compare.rederive(report(compare)))
    row = [c.strip() for c in lines[2].split("|")[1:-1]]
    assert row[1] == "214,352 (214k-214k), 4.54 / 1.00 µs"


class FakeCpu:
    """A process's CPU seconds and a clock, advanced by the waits."""

    def __init__(self, busy_windows: int, tick: float) -> None:
        self.busy_windows = busy_windows
        self.tick = tick
        self.seconds = 0.0
        self.now = 0.0

    def sleep(self, window: float) -> None:
        self.now += window
        if self.busy_windows > 0:
            self.busy_windows -= 1
            self.seconds += 3 * self.tick  # busy: three ticks in the window


def test_nsqd_is_idle_after_two_quiet_windows_in_a_row(compare: ModuleType) -> None:
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    fake = FakeCpu(busy_windows=3, tick=tick)
    assert compare.wait_idle(
        lambda: fake.seconds, deadline=10.0, clock=lambda: fake.now, sleep=fake.sleep
    )
    assert fake.now == pytest.approx(5 * compare.SETTLE_WINDOW)  # three busy, two quiet
    busy = FakeCpu(busy_windows=1000, tick=tick)
    assert not compare.wait_idle(
        lambda: busy.seconds, deadline=1.0, clock=lambda: busy.now, sleep=busy.sleep
    )


class FakeHttp:
    """nsqd's HTTP API as settle() reads it: a deleted topic is listed a few reads more."""

    def __init__(self, listed_for: int) -> None:
        self.listed_for = listed_for
        self.reads = 0

    def delete_topic(self, topic: str) -> None:
        self.topic = topic

    def stats(self) -> dict[str, Any]:
        self.reads += 1
        listed = self.reads <= self.listed_for
        return {"topics": [{"topic_name": self.topic}] if listed else None}


def test_settling_waits_until_the_deleted_topic_is_gone(
    compare: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    http = FakeHttp(listed_for=2)
    server = SimpleNamespace(
        tcp_address="127.0.0.1:1", http=http, is_real=False, process=None, bin_dir=None
    )
    args = SimpleNamespace(settle_timeout=5.0)
    bench = compare.Bench(args, server, None)
    monkeypatch.setattr(compare, "wait_idle", lambda cpu, deadline: True)
    bench._delete("cmp_topic")
    settled = bench.settle()
    assert settled["settled"] and http.reads == 3
    assert compare.settle_summary([{"settle": settled}, {"error": "x"}])["runs"] == 1


def test_the_compiled_build_is_set_beside_the_pure_one_and_judged_against_go(
    compare: ModuleType,
) -> None:
    cells = {
        "gnsqlite": cell(300_000, 2.0),
        compare.COMPILED: cell(360_000, 1.6),
        "go": cell(400_000, 1.5),
    }
    r = compare.ratios(cells)
    assert r["compiled_vs_pure"] == pytest.approx(1.2)
    assert r["compiled_cpu_vs_pure"] == pytest.approx(0.8)
    assert r["compiled_vs_go"] == pytest.approx(0.9)
    assert r["compiled_cpu_vs_go"] == pytest.approx(1.6 / 1.5)
    latency = {
        "gnsqlite": cell(14_000, 30.0),
        compare.COMPILED: cell(15_000, 28.0),
        "bare-gevent": cell(16_000, 27.0),
    }
    rows = {
        "consume_2500": {"cells": cells, "ratios": r, "met": ""},
        "pub_sync": {"cells": latency, "ratios": compare.ratios(latency), "met": ""},
        "consume_2500_tls": {"cells": cells, "ratios": r, "met": ""},
    }
    lines = compare.compiled_table({"rows": rows})
    assert len(lines) == 5 and len(lines[1].split("|")) == len(lines[0].split("|"))
    consume = [c.strip() for c in lines[2].split("|")[1:-1]]
    assert consume[0] == "consume, max_in_flight 2500"
    assert consume[3:] == [
        "1.20x, 0.80x",
        "0.90x, 1.07x",
        "-",
        "NOT met (>= 1.0x go), NOT met (CPU <= 1.00x go's)",
    ]
    pub = [c.strip() for c in lines[3].split("|")[1:-1]]
    assert pub[0] == "sync PUB"
    assert pub[5:] == ["0.94x", "NOT met (>= 0.95x bare-gevent)"]  # 15,000 / 16,000
    assert lines[4].split("|")[-2].strip() == "-"  # no compiled target on that row
    few = {**cells, compare.COMPILED: cell(360_000, 1.6, runs=3)}
    rows = {"consume_100": {"cells": few, "ratios": compare.ratios(few), "met": ""}}
    assert compare.compiled_table({"rows": rows})[2].endswith("| n/a (3 runs < 5) |")


def test_a_cell_refuses_to_run_the_build_not_asked_for(compare: ModuleType) -> None:
    import gnsqlite

    spec = {"client": "gnsqlite", "compiled": not gnsqlite.compiled, "transport": "plain"}
    with pytest.raises(RuntimeError, match="not the build asked"):
        compare.run_cell(spec)


def test_a_run_stops_saying_why_when_nsqd_exited(compare: ModuleType) -> None:
    running = SimpleNamespace(process=SimpleNamespace(exit_status=None))
    assert compare.server_gone(running) == ""
    died = SimpleNamespace(
        process=SimpleNamespace(exit_status=2),
        stderr_text=lambda: "[nsqd] INFO: starting\npanic: runtime error\n",
    )
    assert compare.server_gone(died) == (
        "nsqd exited with status 2; the end of its output:\n"
        "[nsqd] INFO: starting\npanic: runtime error"
    )
