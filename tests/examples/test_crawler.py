"""examples/crawler: the monkey-patched crawl pipeline, run to completion."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from gnsqlite.testing import NsqdServer

ROOT = Path(__file__).resolve().parents[2]


def crawl(
    nsqd: NsqdServer, tmp_path: Path, *options: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run the crawler with ``options`` to the end; its output and its JSON report."""
    report_path = tmp_path / "report.json"
    address = ["--nsqd-tcp-address", nsqd.tcp_address, "--report", str(report_path)]
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "crawler"), *address, *options],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result, json.loads(report_path.read_text())


def test_crawl_fetches_every_page_within_depth_exactly_once(
    nsqd: NsqdServer, tmp_path: Path
) -> None:
    result, report = crawl(nsqd, tmp_path, "--pages", "300", "--max-depth", "6")
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


def test_a_traced_crawl_carries_each_url_s_trace_from_its_publish_into_its_fetch(
    nsqd: NsqdServer, tmp_path: Path
) -> None:
    # --trace: every fetch's CONSUMER span is the child of the PRODUCER span that
    # published its URL (through nsqd, in the trace envelope); the seed's is the crawl's
    trace_path = tmp_path / "spans.jsonl"
    _, report = crawl(
        nsqd, tmp_path, "--pages", "40", "--max-depth", "3", "--trace", str(trace_path)
    )
    spans = [json.loads(line) for line in trace_path.read_text().splitlines()]
    by_id = {span["span_id"]: span for span in spans}
    [root] = [span for span in spans if span["name"] == "crawl"]
    fetches = [span for span in spans if span["name"] == "process urls"]
    parses = [span for span in spans if span["name"] == "process results"]
    assert len(fetches) == sum(report["fetches"].values())  # one span per fetch
    for fetch in fetches:
        published = by_id[fetch["parent_id"]]  # the span that published the URL
        assert published["name"] == "publish urls" and published["kind"] == "PRODUCER"
        assert fetch["kind"] == "CONSUMER" and fetch["links"] == [published["span_id"]]
        assert fetch["trace_id"] == published["trace_id"]
        assert fetch["attributes"]["messaging.consumer.group.name"] == "fetch"
    seed_fetch = [f for f in fetches if by_id[f["parent_id"]]["parent_id"] == root["span_id"]]
    assert len(seed_fetch) == 1 and seed_fetch[0]["trace_id"] == root["trace_id"]
    # each fetch published its page in its own span; each parse batch links to those pages
    pages = [span for span in spans if span["name"] == "publish results"]
    assert {by_id[page["parent_id"]]["name"] for page in pages} == {"process urls"}
    linked = {link for parse in parses for link in parse["links"]}
    assert {page["span_id"] for page in pages} <= linked
    mpubs = [s for s in spans if s["name"] == "publish urls" and s["parent_id"] != root["span_id"]]
    assert {by_id[mpub["parent_id"]]["name"] for mpub in mpubs} == {"process results"}
