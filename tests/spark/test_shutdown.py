"""SIGTERM in a streaming source's process: a stop is never cut short (no Spark needed)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest

from gnsqlite.spark import _shutdown
from gnsqlite.spark._shutdown import exit_on_sigterm, started, stopping


@pytest.fixture(autouse=True)
def fresh_process_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test sees a process with no source and SIGTERM's default action; restored after."""
    monkeypatch.setattr(_shutdown, "_state", _shutdown._State())
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Source:
    """A source whose stop runs ``during`` half-way (as a real one waits for its hub)."""

    def __init__(self, during: Any = None) -> None:
        self.steps: list[str] = []
        self.during = during

    def stop(self) -> None:
        with stopping(self) as mine:
            if not mine:
                return
            self.steps.append("give back")
            if self.during is not None:
                self.during()
            self.steps.append("closed")


def sigterm() -> None:
    signal.raise_signal(signal.SIGTERM)


def test_a_sigterm_during_a_stop_exits_only_once_the_stop_finished() -> None:
    # Spark's closed socket started the stop; its SIGTERM lands in the middle.
    exit_on_sigterm()
    source = Source(during=sigterm)
    started(source)
    with pytest.raises(SystemExit) as exited:
        source.stop()
    assert source.steps == ["give back", "closed"]
    assert exited.value.code == 128 + signal.SIGTERM


def test_a_sigterm_before_any_stop_stops_every_started_source_then_exits() -> None:
    exit_on_sigterm()
    first, second, never_started = Source(), Source(), Source()
    started(first)
    started(second)
    with pytest.raises(SystemExit) as exited:
        sigterm()
    assert exited.value.code == 128 + signal.SIGTERM
    assert first.steps == second.steps == ["give back", "closed"]
    assert never_started.steps == []
    # Spark's runner then calls stop() again: the source was already stopped.
    first.stop()
    assert first.steps == ["give back", "closed"]


def test_a_second_sigterm_is_ignored() -> None:
    exit_on_sigterm()
    source = Source(during=sigterm)
    started(source)
    with pytest.raises(SystemExit):
        sigterm()  # the handler stops the source, whose stop gets a second SIGTERM
    assert source.steps == ["give back", "closed"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN


def test_a_stop_without_sigterm_raises_nothing_and_runs_once() -> None:
    exit_on_sigterm()
    source = Source()
    started(source)
    source.stop()
    source.stop()
    assert source.steps == ["give back", "closed"]


def test_an_application_sigterm_handler_is_left_alone() -> None:
    def mine(signum: int, frame: Any) -> None:
        """The application's own handler."""

    signal.signal(signal.SIGTERM, mine)
    exit_on_sigterm()
    assert signal.getsignal(signal.SIGTERM) is mine
