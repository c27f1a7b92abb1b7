"""examples/crawler: the monkey-patched crawl pipeline, run to completion."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gnsqlite.testing import NsqdServer

ROOT = Path(__file__).resolve().parents[2]


def test_crawl_fetches_every_page_within_depth_exactly_once(
    nsqd: NsqdServer, tmp_path: Path
) -> None:
    report_path = tmp_path / "report.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "crawler"),
            "--nsqd-tcp-address",
            nsqd.tcp_address,
            "--pages",
            "300",
            "--max-depth",
            "6",
            "--report",
            str(report_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(report_path.read_text())
    assert report["done"] is True
    depth, fetches = report["depth"], report["fetches"]
    within = {path for path, d in depth.items() if d <= 6}
    beyond = set(depth) - within
    assert len(within) == report["within_depth"] >= 300
    assert beyond, "the site must have pages beyond the depth limit"
    assert {path: fetches.get(path, 0) for path in within} == dict.fromkeys(within, 1)
    assert set(fetches) == within  # nothing beyond the limit, nothing off the site
    assert report["parsed"] == len(within)
    assert 1 <= report["parse_batches"] <= report["parsed"]  # the parse stage takes batches
    assert "fetched once" in result.stdout
