"""The fault runs' books: what counts as lost, and what a loss report says."""

from __future__ import annotations

import sys
import threading

import gevent
import greenlet

from gnsqlite.message import Message
from gnsqlite.testing import wait_until
from gnsqlite.testing.faults import DeliveryLedger, Handling, live_greenlets


def message(number: int, attempts: int) -> Message:
    return Message(b"0" * 16, str(number).encode(), 0, attempts, "127.0.0.1:4150", None, 60.0)  # type: ignore[arg-type]


def test_a_given_up_message_is_accounted_for_and_a_lost_one_says_what_was_seen() -> None:
    ledger = DeliveryLedger()
    for number in range(4):
        ledger.ack(number)
    ledger.delivered(0, 1)
    ledger.handled(0, Handling("id0", None, False, True))
    for attempts in (1, 2, 6):
        ledger.delivered(1, attempts)
    ledger.gave_up(message(1, 6))  # past max_attempts: the hook had it
    ledger.delivered(2, 3)
    ledger.delivered(2, 2)  # a lower count arriving late does not hide the highest
    assert ledger.lost() == [2, 3]
    assert ledger.given_up == {1: 6}
    assert ledger.explain_lost() == "2 (delivered, attempts up to 3), 3 (never delivered)"
    assert "lost 2 given up 1" in ledger.summary()


def test_settling_forgets_deliveries_below_the_mark() -> None:
    ledger = DeliveryLedger()
    ledger.ack(5)
    ledger.delivered(5, 1)
    ledger.delivered(20, 1)
    ledger.handled(5, Handling("id5", None, False, True))
    ledger.settle(10)
    assert ledger.deliveries == {20: 1}
    assert ledger.lost() == [] and ledger.explain_lost() == "none"


def test_settling_folds_given_up_numbers_and_fin_failed_ids_so_the_books_stay_flat() -> None:
    """A long soak settles every minute: nothing of a settled number may stay behind."""
    ledger = DeliveryLedger()
    for number in (3, 4, 30):
        ledger.ack(number)
    ledger.server_error(None, Exception("E_FIN_FAILED FIN id3 failed"))
    ledger.handled(3, Handling("id3", None, False, True))
    ledger.gave_up(message(4, 6))
    ledger.gave_up(message(30, 6))
    ledger.settle(10)
    assert ledger.fin_failed == set() and ledger.given_up == {30: 6}
    assert ledger.acked == {30} and ledger.lost() == []
    assert "given up 2" in ledger.summary() and ledger.acked_count == 3


def test_settled_numbers_cost_nothing_and_late_ones_are_told_from_first_handlings() -> None:
    """No per-number record survives settling (a bitmap grew 450 KB an hour at 1,000 msg/s)."""
    ledger = DeliveryLedger()
    for number in range(100):
        if number == 7:
            ledger.publish_failed(7)  # raised: maybe stored, maybe not
            continue
        ledger.ack(number)
        if number != 8:  # 8 is still in flight when the books settle
            ledger.handled(number, Handling(f"id{number}", None, False, True))
    ledger.settle(100)
    assert (ledger.handlings, ledger.acked) == ({}, {8})
    ledger.handled(5, Handling("id5", None, False, True))  # a settled number: late
    ledger.handled(7, Handling("id7", None, False, True))  # the failed publish was stored
    ledger.handled(8, Handling("id8", None, False, True))  # first handling, after settling
    assert ledger.duplicates()["late"] == 1 and sorted(ledger.handlings) == [7, 8]
    assert ledger.lost() == [] and ledger.unacked == 1
    ledger.settle(100)
    ledger.handled(8, Handling("id8", None, False, True))
    assert ledger.duplicates()["late"] == 2 and ledger.handled_count == 102
    ledger.settle(10_000_000)  # three hours at 1,000 msg/s
    assert max(sys.getsizeof(value) for value in vars(ledger).values()) < 10_000


def test_a_slow_delivery_that_completes_after_its_redelivery_explains_the_duplicate() -> None:
    """Handlings are listed as they complete: the timed-out one may come second."""
    ledger = DeliveryLedger(transit=0.6)
    ledger.ack(7)
    ledger.handled(7, Handling("id7", None, False, True, spare=0.99))  # the quick redelivery
    ledger.handled(7, Handling("id7", None, True, True, spare=0.0))  # the first, slow one
    ledger.ack(8)
    ledger.handled(8, Handling("id8", None, False, True, spare=0.99))
    ledger.handled(8, Handling("id8", None, False, True, spare=0.98))  # nothing explains this one
    dups = ledger.duplicates()
    assert dups["timed_out"] == 1 and dups["unexplained"] == 1


def test_live_greenlets_counts_this_thread_s_not_another_thread_s() -> None:
    """Like gevent's threadpool workers (its resolver starts them and they stay)."""
    release = threading.Event()
    theirs: list[int] = []

    def other_thread() -> None:
        waiting = greenlet.greenlet(release.wait)
        theirs.extend((id(waiting), id(greenlet.getcurrent())))
        waiting.switch()

    thread = threading.Thread(target=other_thread)
    thread.start()
    sleeper = gevent.spawn(gevent.sleep, 5)
    try:
        wait_until(lambda: len(theirs) == 2, timeout=5)
        gevent.sleep(0)
        live = live_greenlets()
        assert id(sleeper) in live
        assert not live & set(theirs)
    finally:
        release.set()
        thread.join(5)
        sleeper.kill()
    assert id(sleeper) not in live_greenlets()
