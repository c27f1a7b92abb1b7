"""The code in the documentation (``docs/*.md``) is right, and its links lead somewhere.

* every ``python`` block compiles (files it includes with ``--8<--`` are read in);
* every ``pycon`` block runs as a doctest;
* a ``python`` block right after a ``<!-- docs-test: run -->`` line runs against the
  test's nsqd (the embedded one, or the real one with ``GNSQLITE_NSQD``), with
  ``127.0.0.1:4150`` replaced by its address; a block that defines ``test_*(nsqd)``
  functions has them called;
* no example a reader copies (a ``python`` block of the pages or of README.md) waits
  by polling: no ``while`` loop around a ``sleep``; they wait on an Event;
* every relative link of README.md and of the pages names a file that exists, so the
  pages read on GitHub as they do on the built site (``tox -e docs`` checks the site).
"""

from __future__ import annotations

import ast
import doctest
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
RUN_MARK = "<!-- docs-test: run -->"
PLACEHOLDER = "127.0.0.1:4150"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*$")
_SNIPPET = re.compile(r'^\s*--8<--\s+"(?P<path>[^"]+)"\s*$')
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    run: bool

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _expand(code: str) -> str:
    """``code`` with each ``--8<-- "path"`` line replaced by that file (relative to the root)."""
    out = []
    for line in code.splitlines():
        match = _SNIPPET.match(line)
        out.append((ROOT / match["path"]).read_text() if match else line)
    return "\n".join(out) + "\n"


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of ``page``, indented ones (in lists and tabs) included."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, lang, start = opening["indent"], opening["lang"], i
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        i += 1
        before = (lines[j].strip() for j in range(start - 1, -1, -1))
        previous = next((text for text in before if text), "")
        code = textwrap.dedent("\n".join(line.removeprefix(indent) for line in body))
        found.append(Block(page, start + 1, lang, _expand(code), previous == RUN_MARK))
    return found


ALL = [block for page in PAGES for block in blocks(page)]
PYTHON = [b for b in ALL if b.lang == "python"]
PYCON = [b for b in ALL if b.lang == "pycon"]
RUN = [b for b in PYTHON if b.run]


@pytest.mark.no_server
def test_the_pages_have_code_to_check() -> None:
    # Guards the parser: if it stopped finding blocks, every test below would pass vacuously.
    assert len(PYTHON) >= 20
    assert len(PYCON) >= 2
    assert len(RUN) >= 3


@pytest.mark.no_server
@pytest.mark.parametrize("block", PYTHON, ids=lambda b: b.name)
def test_python_blocks_compile(block: Block) -> None:
    compile(block.code, block.name, "exec")


@pytest.mark.no_server
@pytest.mark.parametrize("block", PYCON, ids=lambda b: b.name)
def test_pycon_blocks_run_as_doctests(block: Block) -> None:
    test = doctest.DocTestParser().get_doctest(
        block.code, {}, block.name, str(block.page), block.line
    )
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
    assert runner.tries > 0


@pytest.mark.parametrize("block", RUN, ids=lambda b: b.name)
def test_runnable_blocks_run_against_nsqd(block: Block, nsqd: Any) -> None:
    namespace: dict[str, Any] = {"__name__": "docs_block"}
    exec(compile(block.code.replace(PLACEHOLDER, nsqd.tcp_address), block.name, "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_") and callable(f)]
    assert tests or PLACEHOLDER in block.code, (
        f"{block.name}: a runnable block must use {PLACEHOLDER} or define test_*(nsqd)"
    )
    for func in tests:
        func(nsqd)


def _polling_loops(code: str) -> list[int]:
    """The lines of ``while`` loops in ``code`` whose body calls a ``sleep``."""
    found = []
    for loop in ast.walk(ast.parse(code)):
        if isinstance(loop, ast.While):
            calls = (n.func for n in ast.walk(loop) if isinstance(n, ast.Call))
            names = {getattr(f, "attr", getattr(f, "id", None)) for f in calls}
            if "sleep" in names:
                found.append(loop.lineno)
    return found


README_PYTHON = [b for b in blocks(ROOT / "README.md") if b.lang == "python"]


@pytest.mark.no_server
@pytest.mark.parametrize("block", PYTHON + README_PYTHON, ids=lambda b: b.name)
def test_examples_wait_on_events_not_polling_loops(block: Block) -> None:
    loops = _polling_loops(block.code)
    assert not loops, (
        f"{block.name}: a while loop around sleep() at line(s) {loops} of the block;"
        " wait on a gevent.event.Event (or consumer.join()) with a timeout instead"
    )


def _relative_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # not inside code
    targets = [m["target"] for m in _LINK.finditer(text)]
    return [t for t in targets if not re.match(r"[a-z]+:|#", t)]


@pytest.mark.no_server
@pytest.mark.parametrize("page", [ROOT / "README.md", *PAGES], ids=lambda p: p.name)
def test_relative_links_name_files_that_exist(page: Path) -> None:
    missing = [t for t in _relative_links(page) if not (page.parent / t.split("#", 1)[0]).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"
