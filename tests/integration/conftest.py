"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gnsqlite.consumer import Consumer


@pytest.fixture
def consumers() -> Iterator[list[Consumer]]:
    """Append the consumers a test makes: each is closed after the test."""
    made: list[Consumer] = []
    yield made
    for consumer in made:
        consumer.close(timeout=5.0)
