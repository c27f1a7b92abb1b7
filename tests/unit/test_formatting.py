"""The code is the formatter's output: no hand-wrapped style kept by a marker.

``ruff format --check`` (tox, CI) sees that every file is formatted; this
test sees that no file opts out of it with a ``fmt`` marker.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.no_server

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"#\s*fmt:\s*(skip|off)")  # (this file's own pattern is not a marker)


def test_no_file_opts_out_of_the_formatter() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("gnsqlite", "tests", "benchmarks", "examples", "fuzz", "docs", ".ci")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if MARKER.search(line) and path != Path(__file__).resolve()
    ]
    assert not found, f"formatter opt-outs: {found}"
