"""No two public classes of gnsqlite share a name, but the drop-in's pynsq names.

A reader of a traceback or of the reference should never have to ask which
``Reader`` or ``Ledger`` is meant. The pynsq drop-in (``gnsqlite/nsq/``) keeps
pynsq's own names (``nsq.Reader``, ``nsq.Writer``, ``nsq.Message``,
``nsq.ConnectionClosedError``), which code written against pynsq uses; they
may match a name of the library's own API, and only there.
"""

from __future__ import annotations

import ast
import collections
from pathlib import Path

import pytest

import gnsqlite

pytestmark = pytest.mark.no_server

ROOT = Path(gnsqlite.__file__).parent


def public_classes() -> dict[str, list[str]]:
    """Class name -> the modules (paths under gnsqlite/) defining it at their top level."""
    found: dict[str, list[str]] = collections.defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found[node.name].append(str(path.relative_to(ROOT)))
    return found


def test_no_two_public_classes_share_a_name() -> None:
    shared = {}
    for name, paths in public_classes().items():
        own = [p for p in paths if not p.startswith("nsq/")]
        if len(own) > 1 or len(paths) - len(own) > 1:
            shared[name] = paths
    assert not shared, f"public classes sharing a name: {shared}"
