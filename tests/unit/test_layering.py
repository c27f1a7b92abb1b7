"""The broker package has no import circle: state at the bottom, front ends above it.

Every import counts, including those under ``if TYPE_CHECKING:`` and inside
functions: a circle that only the type checker sees is still a circle in the
design (the lower module knows the upper one).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gnsqlite.broker

pytestmark = pytest.mark.no_server

PACKAGE = "gnsqlite.broker"
BROKER_DIR = Path(gnsqlite.broker.__file__).parent

#: Modules holding state; they must not know the protocols that serve it.
STATE_MODULES = {"options", "queues", "persist", "state", "lookupd_db"}
#: Front ends and servers (TCP protocol, HTTP APIs, stats documents, listeners).
FRONT_ENDS = {"client", "http_api", "stats", "nsqd", "lookupd_tcp", "lookupd_http", "lookupd"}


def package_imports(path: Path, modules: set[str]) -> set[str]:
    """The sibling modules of ``path`` (names in ``modules``) that it imports, anywhere."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    found.add(alias.name[len(PACKAGE) + 1 :].split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level == 1:
                base = node.module
            elif node.level == 0 and node.module and node.module.startswith(PACKAGE):
                base = node.module[len(PACKAGE) + 1 :] or None
            else:
                continue
            if base:
                found.add(base.split(".")[0])
            else:  # "from . import stats": each name may be a module
                found.update(alias.name for alias in node.names)
    return found & modules


def import_graph() -> dict[str, set[str]]:
    files = {p.stem: p for p in BROKER_DIR.glob("*.py")}
    names = set(files) - {"__init__", "__main__"}
    return {name: package_imports(path, names) - {name} for name, path in files.items()}


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as ``[a, b, ..., a]``, or ``None``."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return None
        for target in sorted(graph.get(name, ())):
            circle = visit(target, [*path, name])
            if circle:
                return circle
        done.add(name)
        return None

    for start in sorted(graph):
        circle = visit(start, [])
        if circle:
            return circle
    return None


def test_find_circle_reports_a_circle_and_accepts_layers() -> None:
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_parser_sees_type_checking_and_function_level_imports(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import stats\n"
        "from gnsqlite.broker.queues import Topic\n"
        "if TYPE_CHECKING:\n"
        "    from .nsqd import Broker\n"
        "def f():\n"
        "    import gnsqlite.broker.client\n"
    )
    modules = {"stats", "queues", "nsqd", "client", "state"}
    assert package_imports(source, modules) == {"stats", "queues", "nsqd", "client"}


def test_broker_package_has_no_import_circle() -> None:
    graph = import_graph()
    assert {"state", "nsqd", "client", "http_api", "stats", "lookupd_db", "lookupd"} <= set(graph)
    circle = find_circle(graph)
    assert circle is None, "import circle in gnsqlite/broker: " + " -> ".join(circle or ())


def test_state_modules_import_no_front_end() -> None:
    graph = import_graph()
    for name in sorted(STATE_MODULES & set(graph)):
        upward = graph[name] & FRONT_ENDS
        assert not upward, f"broker/{name}.py imports the front end(s) {sorted(upward)}"
