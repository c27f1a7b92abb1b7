"""A bounded fuzz pass over every target in fuzz/targets.py (< 60 s in all).

With atheris installed (the ``fuzz`` extra; tox's fuzz env) each target runs
through ``fuzz/run.py`` for 3,000 coverage-guided inputs from its committed
seeds. Without it, hypothesis feeds the same target functions
``st.binary()``; under ``CI=true`` a missing atheris is a failure, not a
skip. Every committed corpus file (seeds and the inputs of past crashes) is
also replayed on every run.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import gnsqlite  # noqa: E402
from fuzz.targets import TARGETS, run_one  # noqa: E402

pytestmark = pytest.mark.no_server
HAVE_ATHERIS = importlib.util.find_spec("atheris") is not None
CORPUS = ROOT / "fuzz" / "corpus"


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_committed_corpus_raises_only_typed_errors(target: str) -> None:
    files = sorted((CORPUS / target).iterdir())
    assert files, f"no seeds for {target}"
    for path in files:
        run_one(target, path.read_bytes())


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.skipif(
    gnsqlite.compiled,
    reason="coverage-guided fuzzing follows Python bytecode: the compiled build's core runs as C"
    " (the pure build's run fuzzes the same source; the corpus replays on both)",
)
def test_bounded_fuzz_pass(target: str, tmp_path: Path) -> None:
    if not HAVE_ATHERIS:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the fuzz pass under atheris: install the 'fuzz' extra")
        _hypothesis_pass(target)
        return
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "fuzz" / "run.py"),
            "--target",
            target,
            "--runs",
            "3000",
            "--work",
            str(tmp_path / "work"),
            "--artifacts",
            str(tmp_path / "crashes"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert "3000 inputs" in proc.stdout, proc.stdout


def _hypothesis_pass(target: str) -> None:
    @settings(
        max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    @given(st.binary(max_size=2048))
    def run(data: bytes) -> None:
        run_one(target, data)

    run()
