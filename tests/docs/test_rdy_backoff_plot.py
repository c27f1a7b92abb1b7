"""benchmarks/plot_rdy_backoff.py records what its picture claims, from a real run.

The script runs (a producer per nsqd, a Consumer through recording proxies, a
handler that raises for a while) against two of the test's nsqd, and the
recorded RDY commands must show the story the plot in docs/consuming.md tells:
the flow open on both connections, ``RDY 0`` on every connection once the
handler fails, a ``RDY 1`` probe on one connection while the other holds 0, and
the full flow back after the failures end. Then the recording is plotted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "plot_rdy_backoff.py"


def test_the_recorded_run_backs_off_probes_and_recovers(nsqd_factory: Any, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    nsqd = [nsqd_factory().tcp_address for _ in range(2)]
    fail_from, fail_until, duration = 1.0, 1.5, 3.5
    picture, recording = tmp_path / "rdy.png", tmp_path / "rdy.json"
    command = [
        sys.executable,
        str(SCRIPT),
        "--out",
        str(picture),
        "--json",
        str(recording),
        "--duration",
        str(duration),
        "--fail",
        str(fail_from),
        str(fail_until),
    ]
    for address in nsqd:
        command += ["--nsqd", address]
    subprocess.run(command, check=True, timeout=60)
    records = json.loads(recording.read_text())["records"]
    rdy = [(r["t"], r["conn"], r["count"]) for r in records if r["command"] == "RDY"]

    def counts_at(t: float) -> dict[str, int]:
        """Each connection's last RDY written at or before ``t``."""
        last: dict[str, int] = {}
        for when, conn, count in rdy:
            if when <= t:
                last[conn] = count
        return last

    before = counts_at(fail_from)
    assert sorted(before) == ["nsqd 1", "nsqd 2"] and min(before.values()) > 1, rdy
    stopped = [t for t, _, _ in rdy if t >= fail_from and set(counts_at(t).values()) == {0}]
    assert stopped, f"no moment with RDY 0 on every connection after the failures began: {rdy}"
    probes = [t for t, _, _ in rdy if t > stopped[0] and sorted(counts_at(t).values()) == [0, 1]]
    assert probes, f"no RDY 1 probe on one connection while the other held 0: {rdy}"
    recovered = [
        t for t, _, _ in rdy if fail_until < t < duration and sum(counts_at(t).values()) > 2
    ]
    assert recovered, f"the flow did not come back after the failures ended: {rdy}"
    assert any(r["command"] == "REQ" for r in records)
    assert any(r["command"] == "FIN" and r["t"] > recovered[0] for r in records)
    assert picture.stat().st_size > 10_000  # the plot of that recording
