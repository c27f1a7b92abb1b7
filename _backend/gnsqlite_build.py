"""The build backend: setuptools' own, asking for mypy too when the compiled build is asked for.

``GNSQLITE_COMPILE=1`` (see setup.py) compiles part of the package with mypyc,
which ships with mypy; :func:`get_requires_for_build_wheel` adds mypy to the
isolated build environment then, so ``GNSQLITE_COMPILE=1 pip install .`` needs
nothing installed first. Without the variable every hook is setuptools'
unchanged, and the wheel is the pure one.
"""

from __future__ import annotations

import os

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (every hook, as setuptools has it)

#: What the compiled build needs to build: mypyc, which ships with mypy (2.4 is the
#: one tried), and gevent's stubs (mypy reads every module the compiled ones import).
MYPYC_REQUIREMENTS = ["mypy>=2.4", "types-gevent"]


def compile_requested() -> bool:
    """Whether this build is the compiled one: ``GNSQLITE_COMPILE`` set, and not to ``0``."""
    return os.environ.get("GNSQLITE_COMPILE", "") not in ("", "0")


def get_requires_for_build_wheel(config_settings: dict[str, object] | None = None) -> list[str]:
    if not compile_requested():
        return list(_setuptools.get_requires_for_build_wheel(config_settings))
    # setuptools runs setup.py to find what it needs itself, before mypy is there:
    # that much is the pure build's.
    os.environ["GNSQLITE_COMPILE"], asked = "0", os.environ["GNSQLITE_COMPILE"]
    try:
        requires = list(_setuptools.get_requires_for_build_wheel(config_settings))
    finally:
        os.environ["GNSQLITE_COMPILE"] = asked
    return [*requires, *MYPYC_REQUIREMENTS]
