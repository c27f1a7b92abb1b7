"""A pytest plugin that makes ``import nsq`` (and ``nsq.<module>``) import the drop-in.

Loaded with ``-p nsq_redirect`` when pynsq's own test files run against
``gnsqlite.nsq`` (tests/nsq/test_pynsq_own_suite.py). ``nsq`` becomes
``gnsqlite.nsq`` and each ``nsq.X`` the very module ``gnsqlite.nsq.X``; a
module the drop-in lacks fails to import (it never falls back to pynsq).
``mock``, which pynsq's tests import, is ``unittest.mock`` when the PyPI
backport is not installed. Nothing else is changed.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import unittest.mock
from collections.abc import Sequence

import gnsqlite.nsq


class _Alias(importlib.abc.Loader):
    """Loads ``nsq.X`` as the already importable ``gnsqlite.nsq.X``."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: types.ModuleType) -> None:
        sys.modules[module.__name__] = module


class _Redirect(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("nsq."):
            return None
        ours = "gnsqlite." + fullname
        if importlib.util.find_spec(ours) is None:
            raise ModuleNotFoundError(f"the drop-in has no {ours}", name=fullname)
        return importlib.util.spec_from_loader(fullname, _Alias(ours))


if "mock" not in sys.modules and importlib.util.find_spec("mock") is None:
    sys.modules["mock"] = unittest.mock
sys.modules["nsq"] = gnsqlite.nsq
sys.meta_path.insert(0, _Redirect())


def pytest_report_header() -> str:
    return f"nsq is {sys.modules['nsq'].__name__} ({sys.modules['nsq'].__file__})"
