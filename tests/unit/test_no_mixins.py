"""No class in gnsqlite/ is built from mixins: an object holds its parts.

A class may extend one class of gnsqlite with state or behaviour; more than
one such base (the old ``Connection(Handshake, Reader, Writer)``,
``Producer(Deadlines, PublishCounting)``) means parts that share one
object's attributes, each re-declaring them. Bases that do not count:
Protocols (interfaces) and empty marker classes (no attribute, no method:
``protocol.events.Event``). Read from the source (``ast``), so nothing is
imported and every module is checked, the optional front ends included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gnsqlite

pytestmark = pytest.mark.no_server

ROOT = Path(gnsqlite.__file__).parent

#: pynsq's public class tree, kept by the drop-in so that code written against pynsq
#: (``isinstance(conn, nsq.event.EventedMixin)``, ``conn.on(...)``) runs unchanged.
PYNSQ_API = {("nsq/conn.py", "AsyncConn"), ("nsq/message.py", "Message")}


def _classes() -> dict[str, list[tuple[str, ast.ClassDef]]]:
    found: dict[str, list[tuple[str, ast.ClassDef]]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append((str(path.relative_to(ROOT)), node))
    return found


def _is_protocol(node: ast.ClassDef) -> bool:
    return any(ast.unparse(base).split(".")[-1].startswith("Protocol") for base in node.bases)


def _is_marker(node: ast.ClassDef) -> bool:
    """An empty class: a docstring and ``__slots__ = ()`` at most."""
    for stmt in node.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue
        if isinstance(stmt, ast.Assign) and ast.unparse(stmt) == "__slots__ = ()":
            continue
        return False
    return True


def _parts(node: ast.ClassDef, classes: dict[str, list[tuple[str, ast.ClassDef]]]) -> list[str]:
    """The bases of ``node`` that are gnsqlite classes with state or behaviour."""
    parts = []
    for base in node.bases:
        name = ast.unparse(base).split("[")[0].split(".")[-1]
        defs = [d for _, d in classes.get(name, [])]
        if defs and not all(_is_protocol(d) or _is_marker(d) for d in defs):
            parts.append(name)
    return parts


def test_no_class_has_two_bases_of_gnsqlite_with_state_or_behaviour() -> None:
    classes = _classes()
    built = [
        f"{path}: class {node.name}({', '.join(parts)})"
        for defs in classes.values()
        for path, node in defs
        if len(parts := _parts(node, classes)) > 1
    ]
    assert not built, "classes built from parts instead of holding them:\n" + "\n".join(built)


def test_no_mixin_classes_but_pynsqs_own() -> None:
    classes = _classes()
    mixins = [
        f"{path}: class {node.name}"
        for defs in classes.values()
        for path, node in defs
        if (path, node.name) not in PYNSQ_API
        and any("Mixin" in ast.unparse(base) for base in node.bases)
    ]
    assert not mixins, "mixins:\n" + "\n".join(mixins)
    defined = {name for name in classes if "Mixin" in name}
    assert defined <= {"EventedMixin"}, defined  # the drop-in's pynsq name only


def test_the_checks_see_a_class_built_from_two_parts() -> None:
    # the rule itself, on the shape the connection had
    tree = ast.parse(
        "class Reader:\n    def read(self): ...\n"
        "class Writer:\n    def write(self): ...\n"
        "class Marker:\n    __slots__ = ()\n"
        "class Connection(Reader, Writer): ...\n"
        "class Delivery(Marker, Reader): ...\n"
    )
    classes = {n.name: [("x.py", n)] for n in tree.body if isinstance(n, ast.ClassDef)}
    assert _parts(classes["Connection"][0][1], classes) == ["Reader", "Writer"]
    assert _parts(classes["Delivery"][0][1], classes) == ["Reader"]
