"""benchmarks/compare.py's ratios and main table, from hand-made cells (no run, no server)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.no_server

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "compare.py"


@pytest.fixture(scope="module")
def compare() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_compare", _PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def cell(rate: float, cpu_us: float) -> dict[str, Any]:
    return {
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
