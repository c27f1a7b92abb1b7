"""The protocol core and the flow policies stay free of I/O: no gevent, socket, time or logging.

Two checks: what each file of ``protocol/`` and ``flow/`` imports, and what
importing the packages pulls in (through ``gnsqlite/__init__`` and its
imports too), in a fresh interpreter.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import gnsqlite.flow
import gnsqlite.protocol

pytestmark = pytest.mark.no_server

FORBIDDEN = {"gevent", "socket", "time", "logging", "ssl", "select", "threading", "asyncio"}
PURE_DIRS = [Path(gnsqlite.protocol.__file__).parent, Path(gnsqlite.flow.__file__).parent]
#: What importing a pure package must not load, directly or through others.
NOT_LOADED = ("socket", "ssl", "gevent", "logging")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_protocol_and_flow_packages_import_no_io_modules() -> None:
    files = [f for d in PURE_DIRS for f in d.glob("*.py")]
    assert files
    for path in files:
        bad = imported_modules(path) & FORBIDDEN
        assert not bad, f"{path.name} imports {sorted(bad)}"


@pytest.mark.parametrize("package", ["gnsqlite.protocol", "gnsqlite.flow"])
def test_importing_a_pure_package_loads_no_io_module(package: str) -> None:
    code = (
        "import sys\n"
        f"import {package}\n"
        f"print(' '.join(m for m in {NOT_LOADED!r} if m in sys.modules))\n"
    )
    root = Path(gnsqlite.protocol.__file__).parents[2]
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    ).stdout.split()
    assert loaded == [], f"import {package} loads {loaded}"
