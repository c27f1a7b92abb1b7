"""The embedded broker imports nothing from the client side.

It may use the pure core (``protocol/``, ``flow/``, ``errors``, ``net``, the
option mechanism), the hub services below the connections (``tcp``, the
``timers`` wheel, the HTTP transport) and the stream codecs; never the
connection, the Consumer or Producer, their configs, the HTTP clients, the
drop-in, Spark, the CLI or the testing helpers. Every import counts: those
under ``TYPE_CHECKING`` and inside functions too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gnsqlite.broker

pytestmark = pytest.mark.no_server

BROKER_DIR = Path(gnsqlite.broker.__file__).parent
#: What the broker may import from ``gnsqlite`` (a module, or a package and all below it).
ALLOWED = {
    "gnsqlite.broker",
    "gnsqlite.protocol",
    "gnsqlite.flow",
    "gnsqlite.errors",
    "gnsqlite.net",
    "gnsqlite.options",
    "gnsqlite.timers",
    "gnsqlite.http_transport",
    "gnsqlite.codecs",
    "gnsqlite._version",
}


def gnsqlite_imports(path: Path) -> set[str]:
    """The ``gnsqlite`` modules ``path`` (a module of ``gnsqlite/broker``) imports, anywhere."""
    package = "gnsqlite.broker"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "gnsqlite")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: 3 - node.level]
                target = ".".join([*base, *([node.module] if node.module else [])])
                if node.module is None:  # "from .. import http": each name may be a module
                    found.update(f"{target}.{a.name}" for a in node.names)
                    continue
            else:
                target = node.module or ""
            if target.split(".")[0] == "gnsqlite":
                found.add(target)
    return found


def client_side(module: str) -> bool:
    return not any(module == ok or module.startswith(ok + ".") for ok in ALLOWED)


def test_the_parser_sees_every_form_of_import(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from ..http import http_request\n"
        "from .. import conn\n"
        "from .queues import Topic\n"
        "if TYPE_CHECKING:\n"
        "    from ..producer import Producer\n"
        "def f():\n"
        "    import gnsqlite.consumer\n"
    )
    found = gnsqlite_imports(source)
    assert found == {
        "gnsqlite.http",
        "gnsqlite.conn",
        "gnsqlite.broker.queues",
        "gnsqlite.producer",
        "gnsqlite.consumer",
    }
    assert sorted(filter(client_side, found)) == [
        "gnsqlite.conn",
        "gnsqlite.consumer",
        "gnsqlite.http",
        "gnsqlite.producer",
    ]


def test_the_broker_imports_nothing_from_the_client_side() -> None:
    files = sorted(BROKER_DIR.glob("*.py"))
    assert len(files) > 10
    wrong = {
        f"broker/{path.name}": sorted(filter(client_side, gnsqlite_imports(path))) for path in files
    }
    wrong = {name: modules for name, modules in wrong.items() if modules}
    assert not wrong, f"the broker imports client-side modules: {wrong}"
