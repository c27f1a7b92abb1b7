"""``pip install 'gnsqlite[examples]'`` brings every package the examples import.

Before, examples/gunicorn_flask had no install line: ``gunicorn: command not
found``, then ``No module named 'packaging'`` for its gevent worker.
"""

from __future__ import annotations

import ast
import configparser
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: distribution (as the extra names it) -> the modules it provides (with its own dependencies)
MODULES = {
    "gevent-websocket": ("geventwebsocket",),
    "prometheus_client": ("prometheus_client",),
    "gunicorn": ("gunicorn",),
    "flask": ("flask", "werkzeug"),
    "pynsq": ("nsq", "tornado"),
    "opentelemetry-api": ("opentelemetry",),
    "opentelemetry-sdk": ("opentelemetry",),
}
#: modules of the core dependencies, of the project itself, and the examples' own
PROVIDED = {"gevent", "snappy", "gnsqlite", "pipeline", "testsite", "app"}


def _extra(name: str) -> list[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    text = config.get("options.extras_require", name)  # %(dashboard)s ... resolved
    return [line.strip() for line in text.splitlines() if line.strip()]


def _third_party_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m not in PROVIDED}


@pytest.mark.no_server
def test_the_examples_extra_provides_every_import_of_every_example() -> None:
    requirements = _extra("examples")
    names = {re.split(r"[\[<>=;\s]", r, maxsplit=1)[0].lower() for r in requirements}
    provided = {m for n in names if n in MODULES for m in MODULES[n]}
    scripts = [p for p in (ROOT / "examples").rglob("*.py") if "spark_pipeline" not in p.parts]
    needed = {m: p for p in scripts for m in _third_party_imports(p)}
    missing = {m: str(p.relative_to(ROOT)) for m, p in needed.items() if m not in provided}
    assert not missing, f"imported by the examples, not in the 'examples' extra: {missing}"
    # gunicorn's gevent worker imports packaging: its 'gevent' extra brings it
    assert any(r.startswith("gunicorn[gevent]") for r in requirements), requirements
