"""The optional compiled build: ``GNSQLITE_COMPILE=1`` compiles the pure core with mypyc.

Without the variable the package is built from setup.cfg and pyproject.toml
alone, pure Python, as a plain ``pip install`` gives it. With
``GNSQLITE_COMPILE=1`` the modules in :data:`COMPILED` are compiled from the
same sources and their type hints into C extensions (as black and mypy ship);
the ``.py`` files ship next to them. The build backend
(``_backend/gnsqlite_build.py``) puts mypy, which ships mypyc, in the build
environment. ``gnsqlite.compiled`` says which build is running;
docs/getting-started.md says how to build and install it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile

from setuptools import setup

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_backend"))
from gnsqlite_build import compile_requested

#: The modules the compiled build compiles, and no others: those left out and why
#: are in docs/getting-started.md (tests/unit/test_compiled.py keeps its own copy).
COMPILED = [
    "gnsqlite/protocol/frames.py",
    "gnsqlite/protocol/client.py",
    "gnsqlite/protocol/replies.py",
    "gnsqlite/protocol/publishing.py",
    "gnsqlite/flow/rdy.py",
    "gnsqlite/flow/link_plan.py",
    "gnsqlite/consumer/link.py",
    "gnsqlite/consumer/dispatch.py",
    "gnsqlite/consumer/flow_control.py",
    "gnsqlite/consumer/settle.py",
    "gnsqlite/consumer/lifecycle.py",
    "gnsqlite/consumer/lease.py",
    "gnsqlite/connection/__init__.py",
    "gnsqlite/connection/reader.py",
    "gnsqlite/connection/writer.py",
    "gnsqlite/message.py",
    "gnsqlite/producer/attempt.py",
    "gnsqlite/producer/deadlines.py",
    "gnsqlite/producer/router.py",
    "gnsqlite/producer/stats.py",
]


#: Where mypyc writes its C sources: setuptools wants them under the checkout, so
#: they are removed once the build is done.
C_SOURCES = os.path.join("build", "gnsqlite-compiled")


def compiled_build(tmp: str) -> dict[str, object]:
    """setup()'s arguments for the compiled build: the objects, extensions and
    wheel contents under ``tmp``, outside the checkout.

    So a later pure build here cannot pick up compiled modules left in ``build/``,
    and nothing compiled stays beside the sources.
    """
    from mypyc.build import mypycify

    args = ["--config-file", "setup.cfg", "--cache-dir", os.path.join(tmp, "mypy"), *COMPILED]
    # group_name: one shared library, gnsqlite__mypyc, named after the package
    modules = mypycify(args, opt_level="3", group_name="gnsqlite", target_dir=C_SOURCES)
    return {"ext_modules": modules, "options": {"build": {"build_base": tmp}}}


if compile_requested():
    tmp = tempfile.mkdtemp(prefix="gnsqlite-compiled-build-")
    try:
        setup(**compiled_build(tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(C_SOURCES, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir("build")  # when nothing else was in it
else:
    setup()
