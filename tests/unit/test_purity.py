"""The protocol core must stay free of I/O: no gevent, socket, time or logging."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gnsqlite.protocol

pytestmark = pytest.mark.no_server

FORBIDDEN = {"gevent", "socket", "time", "logging", "ssl", "select", "threading", "asyncio"}
PURE_DIRS = [Path(gnsqlite.protocol.__file__).parent]


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_protocol_package_imports_no_io_modules() -> None:
    files = [f for d in PURE_DIRS for f in d.glob("*.py")]
    assert files
    for path in files:
        bad = imported_modules(path) & FORBIDDEN
        assert not bad, f"{path.name} imports {sorted(bad)}"
