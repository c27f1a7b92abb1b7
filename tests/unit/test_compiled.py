"""``gnsqlite.compiled`` says which build is running, and ``gnsqlite --version`` says it too."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import gnsqlite
from gnsqlite.cli import main

pytestmark = pytest.mark.no_server

#: setup.py's COMPILED, as module names: compiled together, so all are or none is.
COMPILED_MODULES = [
    "gnsqlite.protocol.frames",
    "gnsqlite.protocol.client",
    "gnsqlite.protocol.replies",
    "gnsqlite.protocol.publishing",
    "gnsqlite.flow.rdy",
    "gnsqlite.flow.link_plan",
    "gnsqlite.consumer.link",
    "gnsqlite.consumer.dispatch",
    "gnsqlite.consumer.flow_control",
    "gnsqlite.consumer.settle",
    "gnsqlite.consumer.lifecycle",
    "gnsqlite.consumer.lease",
    "gnsqlite.connection",
    "gnsqlite.connection.reader",
    "gnsqlite.connection.writer",
    "gnsqlite.message",
    "gnsqlite.producer.attempt",
    "gnsqlite.producer.deadlines",
    "gnsqlite.producer.router",
    "gnsqlite.producer.stats",
]


def source_path(module_name: str) -> str:
    """The module's source file as setup.py names it (a package's is its ``__init__.py``)."""
    spec = importlib.util.find_spec(module_name)
    assert spec is not None, module_name
    package = spec.submodule_search_locations is not None
    return module_name.replace(".", "/") + ("/__init__.py" if package else ".py")


def is_extension(module_name: str) -> bool:
    module = importlib.import_module(module_name)
    return module.__file__ is not None and module.__file__.endswith(
        tuple(importlib.machinery.EXTENSION_SUFFIXES)
    )


def test_compiled_is_a_bool_matching_the_modules_loaded() -> None:
    assert type(gnsqlite.compiled) is bool
    assert [is_extension(name) for name in COMPILED_MODULES] == [gnsqlite.compiled] * len(
        COMPILED_MODULES
    )


def test_the_list_matches_setup_py() -> None:
    setup_py = Path(__file__).resolve().parents[2] / "setup.py"
    if not setup_py.is_file():
        pytest.skip("no setup.py next to the tests (not a checkout)")
    paths = [source_path(name) for name in COMPILED_MODULES]
    text = setup_py.read_text()
    assert all(f'"{path}"' in text for path in paths)
    assert text.count('.py",') == len(paths)


def test_version_says_which_build(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    build = "compiled" if gnsqlite.compiled else "pure Python"
    assert capsys.readouterr().out == f"gnsqlite {gnsqlite.__version__} ({build})\n"


def test_a_fresh_interpreter_agrees(tmp_path: Path) -> None:
    # From an empty directory: ``python -c`` puts its working directory first on sys.path
    code = "import gnsqlite; print(gnsqlite.compiled)"
    argv = [sys.executable, "-c", code]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == str(gnsqlite.compiled)
