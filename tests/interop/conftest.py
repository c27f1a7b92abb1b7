"""Fixtures for the interop tests (see interop_support.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from interop_support import Loop


@pytest.fixture
def loop() -> Iterator[Loop]:
    """A tornado IOLoop owned by the test; closed afterwards."""
    loop = Loop()
    try:
        yield loop
    finally:
        loop.close()
