"""Every public module of gnsqlite has a page in the API reference (docs/reference/).

How the test decides what is public: a module or package directly under ``gnsqlite``
(found by :func:`pkgutil.iter_modules` on the package's folder, nothing imported)
whose name does not start with an underscore. ``gnsqlite._version`` and
``gnsqlite.__main__`` are not public; the modules inside a package
(``gnsqlite.consumer.link``) are its implementation, documented through what the
package exports. A module has a page when a page of ``docs/reference/`` renders it
with mkdocstrings' ``::: gnsqlite.<name>`` line (``mkdocs build --strict`` then
fails if that name does not resolve).
"""

from __future__ import annotations

import pkgutil
import re

import pytest
from test_docs_code import DOCS, ROOT

pytestmark = pytest.mark.no_server

_RENDERED = re.compile(r"^:::\s+(?P<name>[\w.]+)\s*$", re.M)


def public_modules() -> list[str]:
    """``gnsqlite.<name>`` for each module and package directly under gnsqlite, no leading ``_``."""
    found = pkgutil.iter_modules([str(ROOT / "gnsqlite")])
    return sorted(f"gnsqlite.{m.name}" for m in found if not m.name.startswith("_"))


def rendered() -> set[str]:
    """The names the reference pages render with ``::: name``."""
    pages = (DOCS / "reference").glob("*.md")
    return {m["name"] for page in pages for m in _RENDERED.finditer(page.read_text())}


def test_the_rule_sees_the_package() -> None:
    # Guards the finder: an empty list would pass the test below vacuously.
    modules = public_modules()
    assert {"gnsqlite.consumer", "gnsqlite.producer", "gnsqlite.protocol"} <= set(modules)
    assert "gnsqlite._version" not in modules and "gnsqlite.__main__" not in modules


def test_every_public_module_has_a_reference_page() -> None:
    missing = [name for name in public_modules() if name not in rendered()]
    assert not missing, f"no docs/reference/*.md page renders these modules: {missing}"
