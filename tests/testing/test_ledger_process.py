"""The soak's books in a child process: the same answers as in-process books, none of the memory."""

from __future__ import annotations

import gc
import random
import tracemalloc
import weakref

import pytest

from gnsqlite.testing import wait_until
from gnsqlite.testing.faults import DeliveryLedger, Handling
from gnsqlite.testing.ledger_process import LedgerProcess

SEED = 20261129


class FakeConnection:
    """What the books ask of a client connection: ``error`` and ``closed``."""

    def __init__(self) -> None:
        self.error: Exception | None = None
        self.closed = False


class FakeMessage:
    def __init__(self, number: int, attempts: int) -> None:
        self.body = str(number).encode()
        self.attempts = attempts


def replay(seed: int, books: list[DeliveryLedger | LedgerProcess]) -> None:
    """A seeded run's events, recorded into each of ``books`` alike.

    Numbers are published (some publishes fail), delivered once or again,
    handled once or twice (redelivered after a timeout, a FIN_FAILED, or
    on a connection that dies after the handling), given up, and settled now
    and then, as in a soak.
    """
    rng = random.Random(seed)
    connections = [FakeConnection()]
    for number in range(3_000):
        if rng.random() < 0.02:
            connections[-1].error = ConnectionResetError("reset by the proxy")
            connections[-1].closed = True
            connections.append(FakeConnection())
        conn = rng.choice(connections[-2:])
        failed = rng.random() < 0.01
        for ledger in books:
            if failed:
                ledger.publish_failed(number)
            else:
                ledger.ack(number)
        roll = rng.random()
        runs = 2 if roll < 0.05 else 0 if roll < 0.07 else 1
        for attempt in range(1, runs + 1):
            outlived = rng.random() < 0.3
            spare = 0.0 if outlived else rng.uniform(0.0, 3.0)
            handling = Handling(f"id{number}", conn, outlived, rng.random() < 0.9, spare)
            fin_failed = rng.random() < 0.1
            for ledger in books:
                ledger.delivered(number, attempt)
                if fin_failed:
                    ledger.server_error(conn, Exception(f"E_FIN_FAILED FIN id{number} failed"))
                ledger.handled(number, handling)
        if roll >= 0.05 and roll < 0.06:
            for ledger in books:
                ledger.gave_up(FakeMessage(number, 5))  # type: ignore[arg-type]
        if roll >= 0.06 and roll < 0.07:
            for ledger in books:
                ledger.failures += 1
        if number % 500 == 499:
            for ledger in books:
                ledger.settle(number - 400)


def test_the_child_s_books_answer_as_books_kept_here() -> None:
    """Every answer the soak asks for, for a seeded run with every kind of duplicate."""
    here = DeliveryLedger(transit=0.6)
    with LedgerProcess(transit=0.6, flush_interval=0.01) as child:
        try:
            replay(SEED, [here, child])
            dups = child.duplicates()
            assert dups == here.duplicates()
            assert dups["connection_lost"] > 0 and dups["timed_out"] > 0, dups
            assert child.lost() == here.lost() and child.lost()  # some were never handled
            assert child.explain_lost(5) == here.explain_lost(5)
            assert child.summary() == here.summary()
            assert (child.acked_count, child.handled_count) == (
                here.acked_count,
                here.handled_count,
            )
            assert child.books()["handlings"] == len(here.handlings)
            assert child.rss_bytes() > 0
        except AssertionError:
            print(f"seed={SEED}")
            raise


def test_recording_costs_this_process_no_memory_per_number() -> None:
    """50,000 handled numbers: megabytes in books kept here, next to nothing with the child's."""

    def record(ledger: DeliveryLedger | LedgerProcess) -> int:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        conn = FakeConnection()
        for number in range(50_000):
            ledger.ack(number)
            ledger.delivered(number, 1)
            ledger.handled(number, Handling(f"{number:016x}", conn, False, True, 1.5))
        if isinstance(ledger, LedgerProcess):
            assert ledger.books()["handlings"] == 50_000  # the records are over there
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before

    tracemalloc.start()
    try:
        here = DeliveryLedger()
        kept_here = record(here)
        with LedgerProcess() as child:
            kept_by_child = record(child)
    finally:
        tracemalloc.stop()
    assert kept_here > 5 * 1024 * 1024, kept_here
    assert kept_by_child < 256 * 1024, (kept_by_child, kept_here)


def test_an_ended_connection_is_told_to_the_child_and_not_kept_here() -> None:
    """The parent holds a connection only until it ends: a soak's dead connections are freed."""
    with LedgerProcess(flush_interval=0.01) as child:
        conn = FakeConnection()
        child.ack(1)
        child.handled(1, Handling("id1", conn, False, True, 1.0))
        conn.error = ConnectionResetError("reset")
        conn.closed = True
        alive = weakref.ref(conn)
        del conn
        wait_until(lambda: alive() is None, timeout=5.0, message="the ended connection freed")
        child.handled(1, Handling("id1", None, False, True, 1.0))  # nsqd redelivered it
        assert child.duplicates()["connection_lost"] == 1


def test_a_question_before_start_says_what_to_do() -> None:
    with pytest.raises(RuntimeError, match="call start"):
        LedgerProcess().lost()
