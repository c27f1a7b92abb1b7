"""Fixtures of the pynsq drop-in tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from nsq_support import Program

from gnsqlite.nsq import runner


@pytest.fixture
def programs(tmp_path: Path) -> Iterator[Callable[[str], Program]]:
    started: list[Program] = []

    def start(source: str) -> Program:
        program = Program(source, tmp_path, f"program{len(started)}.py")
        started.append(program)
        return program

    yield start
    for program in started:
        program.kill()


@pytest.fixture
def closes_dropin_clients() -> Iterator[None]:
    """Close every Reader and Writer a test left open, and check the registry is empty."""
    yield
    for client in list(runner._registry.clients):
        client.close()
    assert runner._registry.clients == []
