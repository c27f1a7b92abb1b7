"""OpenTelemetry stays optional: nothing but gnsqlite.tracing imports it.

tests/integration/test_tracing.py runs a Consumer and a Producer with it
unimportable; this checks, with it installed, that importing gnsqlite and its
other front ends does not load it (a lazy import swallowed by an ``except
ImportError`` would pass the first test and fail this one).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.no_server

_IMPORTS = r"""
import sys
import gnsqlite
gnsqlite.Consumer, gnsqlite.Producer, gnsqlite.Message
import gnsqlite.cli, gnsqlite.consumer, gnsqlite.metrics, gnsqlite.nsq, gnsqlite.producer
import gnsqlite.testing, gnsqlite.trace_envelope
print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
"""


def test_importing_gnsqlite_does_not_import_opentelemetry() -> None:
    pytest.importorskip("opentelemetry.trace")  # installed: so an import would load it
    result = subprocess.run(
        [sys.executable, "-c", _IMPORTS], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_importing_gnsqlite_tracing_does() -> None:
    # the check above would pass vacuously if the probe could not see the import
    pytest.importorskip("opentelemetry.trace")
    probe = _IMPORTS.replace("gnsqlite.trace_envelope", "gnsqlite.tracing")
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "opentelemetry.trace" in result.stdout
