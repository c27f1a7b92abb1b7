"""README.md shows code that runs and a benchmark table that is the stored report's.

* every ``python`` block of the README runs, in order, against the test's nsqd (the
  embedded one, or the real one with ``GNSQLITE_NSQD``), with ``127.0.0.1:4150``
  replaced by its address: the producer's messages reach the consumer's handler;
* the benchmark table between the README's ``benchmark-table`` markers is exactly
  what ``python benchmarks/readme_table.py benchmarks/compare.json`` prints, and
  ``--update`` rewrites a stale copy into the README as it stands.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_docs_code import PLACEHOLDER, ROOT, blocks

README = ROOT / "README.md"
COMMAND = [sys.executable, str(ROOT / "benchmarks" / "readme_table.py")]
REPORT = ROOT / "benchmarks" / "compare.json"
_TABLE = re.compile(r"(<!-- benchmark-table:[^\n]*-->\n).*?(<!-- end benchmark-table -->)", re.S)


def test_every_readme_snippet_runs_against_nsqd(
    nsqd: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    snippets = [block for block in blocks(README) if block.lang == "python"]
    assert len(snippets) >= 2, "the README shows a producer and a consumer"
    for block in snippets:
        assert PLACEHOLDER in block.code, f"{block.name} must name nsqd as {PLACEHOLDER}"
        code = block.code.replace(PLACEHOLDER, nsqd.tcp_address)
        exec(compile(code, block.name, "exec"), {"__name__": "readme"})
    printed = [ast.literal_eval(line) for line in capsys.readouterr().out.splitlines()]
    # the consumer printed what the producer published (the deferred one may not be due yet)
    assert printed and set(printed) <= {b"hello", b"a", b"b", b"later"}, printed


@pytest.mark.no_server
def test_the_readme_table_is_what_the_command_prints_for_the_stored_report() -> None:
    printed = subprocess.run(
        [*COMMAND, str(REPORT)], capture_output=True, text=True, check=True
    ).stdout
    match = _TABLE.search(README.read_text())
    assert match, "README.md has no benchmark-table block"
    shown = README.read_text()[match.end(1) : match.start(2)]
    assert shown == printed, "regenerate it: python benchmarks/readme_table.py --update README.md"


@pytest.mark.no_server
def test_update_rewrites_a_stale_table(tmp_path: Path) -> None:
    stale = tmp_path / "README.md"
    stale.write_text(_TABLE.sub(r"\1| an old table |\n\2", README.read_text()))
    assert stale.read_text() != README.read_text()
    subprocess.run([*COMMAND, str(REPORT), "--update", str(stale)], check=True, capture_output=True)
    assert stale.read_text() == README.read_text()
