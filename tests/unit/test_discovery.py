"""The lookupd polling loop of the Consumer and the Producer, with a scripted poller."""

from __future__ import annotations

import random
from typing import Any

import gevent.event

from gnsqlite.discovery import Discovery, LookupdPoller
from gnsqlite.errors import NoConnectionsError
from gnsqlite.flow import Reconnect
from gnsqlite.testing import wait_until
from gnsqlite.timers import TimerWheel


class ScriptedPoller(LookupdPoller):
    """Answers each poll with the next of ``answers`` (an exception is raised)."""

    def __init__(self, answers: list[Any]) -> None:
        super().__init__(None, [])
        self.answers = answers
        self.asked = 0

    def poll(self) -> set[str]:
        self.asked += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return set(answer)


def test_answers_go_to_on_found_normalised_and_a_failed_poll_changes_nothing() -> None:
    failure = NoConnectionsError({"127.0.0.1:4161": OSError("refused")}, "every lookupd failed")
    poller = ScriptedPoller([["localhost:4150", "garbage"], failure, ["127.0.0.1:4150"]])
    found: list[set[str]] = []
    changed = gevent.event.Event()

    def on_found(addresses: set[str]) -> None:
        found.append(addresses)
        changed.set()

    owner = object()
    discovery = Discovery(
        poller, 0.05, 0.0, Reconnect(0.01, 0.01), random.Random(1), on_found, owner
    )
    discovery.start(TimerWheel.for_hub())
    try:
        assert discovery.first_poll.wait(5)
        wait_until(lambda: len(found) >= 2, timeout=5)
        # The bad address is skipped; the failed poll between them handed nothing over.
        assert found[:2] == [{"localhost:4150"}, {"127.0.0.1:4150"}]
        assert discovery.failed_polls == 1 and discovery.polls >= 2
        assert discovery.last_error is None
    finally:
        discovery.close()
    # Closed: no poll runs and none is scheduled.
    assert discovery.join(0)
    assert TimerWheel.for_hub().owned_by(owner) == []
