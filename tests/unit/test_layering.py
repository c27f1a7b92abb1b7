"""No import circle: anywhere in gnsqlite, and in particular in the broker (state at
the bottom, front ends above it), the consumer (collaborators below the façade,
which none of them imports) and the CLI.

Every import counts, including those under ``if TYPE_CHECKING:`` and inside
functions: a circle that only the type checker sees is still a circle in the
design (the lower module knows the upper one).
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import gnsqlite.broker
import gnsqlite.cli

pytestmark = pytest.mark.no_server

PACKAGE = "gnsqlite.broker"
BROKER_DIR = Path(gnsqlite.broker.__file__).parent

#: Modules holding state; they must not know the protocols that serve it.
STATE_MODULES = {"options", "queues", "persist", "state", "lookupd_db"}
#: Front ends and servers (TCP protocol, HTTP APIs, stats documents, listeners).
FRONT_ENDS = {
    "client",
    "client_commands",
    "client_output",
    "client_reader",
    "http_api",
    "stats",
    "nsqd",
    "lookupd_tcp",
    "lookupd_http",
    "lookupd",
}


def package_imports(path: Path, modules: set[str], package: str = PACKAGE) -> set[str]:
    """The sibling modules of ``path`` (names in ``modules``) that it imports, anywhere."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(package + "."):
                    found.add(alias.name[len(package) + 1 :].split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level == 1:
                base = node.module
            elif node.level == 0 and node.module and node.module.startswith(package):
                base = node.module[len(package) + 1 :] or None
            else:
                continue
            if base:
                found.add(base.split(".")[0])
            else:  # "from . import stats": each name may be a module
                found.update(alias.name for alias in node.names)
    return found & modules


def import_graph(package: str = PACKAGE) -> dict[str, set[str]]:
    """Each module of ``package`` -> the sibling modules it imports (``__init__`` left out)."""
    directory = Path(importlib.import_module(package).__file__ or "").parent
    files = {p.stem: p for p in directory.glob("*.py")}
    names = set(files) - {"__init__", "__main__"}
    return {name: package_imports(path, names, package) - {name} for name, path in files.items()}


def imports_facade(path: Path, package: str) -> bool:
    """Whether ``path`` imports its package's ``__init__`` (the façade), anywhere."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            if any(alias.name == package for alias in node.names):
                return True
        elif isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module is None:
                modules = {p.stem for p in path.parent.glob("*.py")}
                if any(alias.name not in modules for alias in node.names):
                    return True
            elif node.level == 0 and node.module == package:
                return True
    return False


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


def check_collaborators_below_facade(package: str, expected: set[str]) -> None:
    """``package``'s modules (``expected`` among them) import no circle and never its façade."""
    graph = import_graph(package)
    assert expected <= set(graph)
    circle = find_circle(graph)
    assert circle is None, f"import circle in {package}: " + " -> ".join(circle or ())
    directory = Path(importlib.import_module(package).__file__ or "").parent
    for path in sorted(directory.glob("*.py")):
        if path.stem != "__init__":
            assert not imports_facade(path, package), f"{package}.{path.stem} imports the façade"


def test_consumer_collaborators_form_layers_below_the_facade() -> None:
    check_collaborators_below_facade(
        "gnsqlite.consumer", {"link", "links", "flow_control", "dispatch", "settle", "views"}
    )


def test_producer_collaborators_form_layers_below_the_facade() -> None:
    check_collaborators_below_facade(
        "gnsqlite.producer", {"attempt", "deadlines", "pool", "requests", "router", "stats"}
    )


def test_cli_package_has_no_import_circle() -> None:
    graph = import_graph("gnsqlite.cli")
    assert {"bench", "_bench_peers", "_bench_workloads"} <= set(graph)
    circle = find_circle(graph)
    assert circle is None, "import circle in gnsqlite/cli: " + " -> ".join(circle or ())


def test_a_collaborator_importing_the_facade_is_caught(tmp_path: Path) -> None:
    (tmp_path / "link.py").write_text("x = 1\n")
    source = tmp_path / "dispatch.py"
    source.write_text("from . import Consumer\nfrom . import link\n")
    assert imports_facade(source, "gnsqlite.consumer")
    source.write_text("def f():\n    from gnsqlite.consumer import Consumer\n")
    assert imports_facade(source, "gnsqlite.consumer")
    source.write_text("from . import link\nfrom .link import Link\n")
    assert not imports_facade(source, "gnsqlite.consumer")


def module_graph(root: Path) -> dict[str, set[str]]:
    """Every module of the package at ``root`` -> the modules of it that it imports, anywhere.

    ``from . import x`` names the submodule ``x`` when there is one (the
    package itself is already being imported), else the package.
    """
    modules: dict[str, Path] = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.stem == "__init__" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(filter(None, (owner(a.name) for a in node.names)))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
                found.update(subs)
                if len(subs) < len(node.names) and owner(target):
                    found.add(owner(target) or "")
        graph[name] = found - {name, ""}
    return graph


def test_gnsqlite_has_no_import_circle_anywhere() -> None:
    graph = module_graph(Path(gnsqlite.broker.__file__).parents[1])
    assert {"gnsqlite", "gnsqlite.consumer.link", "gnsqlite.cli.bench"} <= set(graph)
    circle = find_circle(graph)
    assert circle is None, "import circle in gnsqlite: " + " -> ".join(circle or ())


# -- the layers of docs/architecture.md, checked against the code ----------------------------

ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
#: The layers, bottom first, as docs/architecture.md's table names them (its first cell
#: starts with the name). A module imports only its own layer and those below, except
#: that the broker imports nothing of the client side and the client side nothing of it.
LAYERS = [
    "pure core",
    "hub services",
    "a connection",
    "clients",
    "the embedded broker",
    "front ends",
]
CLIENT_SIDE = {"a connection", "clients"}


def top_level_names(cell: str) -> list[str]:
    """The backticked modules and packages of a table cell outside parentheses."""
    names, depth = [], 0
    for piece in re.split(r"(`[^`]*`|[()])", cell):
        if piece == "(":
            depth += 1
        elif piece == ")":
            depth -= 1
        elif piece.startswith("`") and depth == 0 and piece.strip("`").endswith((".py", "/")):
            names.append(piece.strip("`"))  # a module or a package, not a class
    return names


def documented_layers(text: str) -> dict[str, list[str]]:
    """Layer -> the modules and packages its row of the table lists (``gnsqlite.x``)."""
    rows = text.split("## The layers", 1)[1].split("\n## ", 1)[0]
    layers: dict[str, list[str]] = {}
    for line in rows.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        layer = next((name for name in LAYERS if cells[0].startswith(name)), None)
        if layer is None or len(cells) < 2:
            continue
        layers[layer] = [
            "gnsqlite." + name.removesuffix("/").removesuffix(".py").replace("/", ".")
            for name in top_level_names(cells[1])
        ]
    return layers


def layer_of(module: str, layers: dict[str, list[str]]) -> list[str]:
    """The layers whose listed names hold ``module`` (it, or a package above it)."""
    return [
        layer
        for layer, names in layers.items()
        if any(module == name or module.startswith(name + ".") for name in names)
    ]


#: The package's own entry points, above every layer.
ENTRY_POINTS = {"gnsqlite", "gnsqlite.__main__", "gnsqlite._version"}


def test_top_level_names_skip_what_is_in_parentheses() -> None:
    cell = "`producer/` (a façade over `pool.py`: the pool (`x.py`)), `Pool`, `deadletter.py`"
    assert top_level_names(cell) == ["producer/", "deadletter.py"]


def test_every_module_is_in_exactly_one_documented_layer() -> None:
    layers = documented_layers(ARCHITECTURE.read_text())
    assert sorted(layers) == sorted(LAYERS), "docs/architecture.md's layer table changed its rows"
    graph = module_graph(Path(gnsqlite.__file__).parent)
    unplaced = sorted(m for m in graph if m not in ENTRY_POINTS and len(layer_of(m, layers)) != 1)
    assert not unplaced, f"in no layer, or in two, of docs/architecture.md: {unplaced}"
    listed = {name for names in layers.values() for name in names}
    missing = sorted(name for name in listed if name not in graph)
    assert not missing, f"docs/architecture.md lists modules that do not exist: {missing}"


def test_each_module_imports_only_its_layer_and_those_below() -> None:
    layers = documented_layers(ARCHITECTURE.read_text())
    graph = module_graph(Path(gnsqlite.__file__).parent)
    wrong = []
    for module, targets in sorted(graph.items()):
        if module in ENTRY_POINTS:
            continue
        (own,) = layer_of(module, layers)  # one each: the test above
        for target in sorted(targets - ENTRY_POINTS):
            (theirs,) = layer_of(target, layers)
            up = LAYERS.index(theirs) > LAYERS.index(own)
            if up or (own == "the embedded broker" and theirs in CLIENT_SIDE):
                wrong.append(f"{module} ({own}) imports {target} ({theirs})")
    assert not wrong, "imports against docs/architecture.md's layers:\n" + "\n".join(wrong)
