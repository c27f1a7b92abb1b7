"""The optional compiled build: ``GNSQLITE_COMPILE=1`` compiles the pure core with mypyc.

Without the variable this does nothing beyond what setup.cfg and pyproject.toml say:
the package is pure Python, as a plain ``pip install`` gives it. With
``GNSQLITE_COMPILE=1`` (and mypy, which ships mypyc, in the build environment:
``pip install mypy`` then ``pip wheel --no-build-isolation``, or see
docs/getting-started.md) the modules in :data:`COMPILED` are compiled from the
same sources and their type hints into C extensions, as black and mypy ship;
the ``.py`` files still ship next to them. ``gnsqlite.compiled`` says which
build is running.
"""

from __future__ import annotations

import os

from setuptools import setup

#: The modules the compiled build compiles (docs/getting-started.md says why these).
COMPILED = [
    "gnsqlite/protocol/frames.py",
    "gnsqlite/protocol/client.py",
    "gnsqlite/protocol/replies.py",
    "gnsqlite/flow/rdy.py",
    "gnsqlite/flow/link_plan.py",
]


def ext_modules() -> list[object]:
    if os.environ.get("GNSQLITE_COMPILE", "") in ("", "0"):
        return []
    from mypyc.build import mypycify

    return list(mypycify(["--config-file", "setup.cfg", *COMPILED], opt_level="3"))


setup(ext_modules=ext_modules())
