"""Which build of gnsqlite the run tests: pure Python, or the compiled build (setup.py).

``GNSQLITE_EXPECT_COMPILED=1`` (tox -e compiled sets it) makes the session stop
at once unless the compiled modules are the ones imported, so a run meant for
the compiled wheel cannot test the checkout's pure modules by mistake.
"""

from __future__ import annotations

import os

import pytest

import gnsqlite


def pytest_report_header() -> str:
    build = "compiled" if gnsqlite.compiled else "pure Python"
    return f"gnsqlite {gnsqlite.__version__} ({build}) from {os.path.dirname(gnsqlite.__file__)}"


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.environ.get("GNSQLITE_EXPECT_COMPILED") == "1" and not gnsqlite.compiled:
        raise pytest.UsageError(
            "GNSQLITE_EXPECT_COMPILED=1 but the gnsqlite imported is not the compiled build"
            f" ({gnsqlite._frames.__file__} is not an extension module): the run would test"
            " the pure modules"
        )
