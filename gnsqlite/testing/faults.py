"""Accounting and fault injection for runs that must lose nothing.

A fault run publishes numbered messages, consumes them through
:class:`~gnsqlite.testing.FaultProxy` while faults happen, and ends by
checking the books:

* :class:`DeliveryLedger` records each acknowledged publish and each handling (which
  message id, on which connection, whether the handler outlived the message
  timeout, whether its FIN could be sent), then says what was lost and
  explains every duplicate;
* :class:`AccountingHandler` is a consumer handler that fails or dawdles at
  seeded rates and records into a ledger;
* :class:`FaultInjector` applies one seeded random fault at a time (cut,
  half-close, stall, delay, broker restart) and counts each kind;
* :func:`live_greenlets`, :func:`rss_bytes`, :func:`open_fds` measure what a
  run must not leak.

Nothing here starts a greenlet or thread by itself.
"""

from __future__ import annotations

import collections
import gc
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import gevent
import gevent.hub
import greenlet

from ..message import Message
from .proxy import FaultProxy

__all__ = [
    "AccountingHandler",
    "Books",
    "FaultInjector",
    "Handling",
    "DeliveryLedger",
    "describe_greenlets",
    "live_greenlets",
    "open_fds",
    "rss_bytes",
    "rss_parts",
    "seed_from_env",
]

ENV_SEED = "GNSQLITE_FAULT_SEED"


def seed_from_env(default: int | None = None) -> int:
    """``$GNSQLITE_FAULT_SEED`` if set, else ``default``, else a fresh random seed."""
    value = os.environ.get(ENV_SEED)
    if value:
        return int(value)
    return default if default is not None else random.SystemRandom().randrange(2**32)


def live_greenlets() -> set[int]:
    """Ids of the live greenlets of the calling thread, other than the hub and the caller.

    Greenlets of other threads (gevent's threadpool workers, which its
    resolver starts on first use and keeps) belong to those threads.
    """
    gevent.get_hub()
    current = greenlet.getcurrent()
    main = _root(current)
    return {
        id(g)
        for g in gc.get_objects()
        if isinstance(g, greenlet.greenlet)
        and not g.dead
        and g is not current
        and not isinstance(g, gevent.hub.Hub)
        and _root(g) is main
    }


def _root(g: greenlet.greenlet) -> greenlet.greenlet:
    """The main greenlet of the thread ``g`` runs in (the end of its parent chain)."""
    while g.parent is not None:
        g = g.parent
    return g


def describe_greenlets(ids: set[int]) -> list[str]:
    """What each live greenlet of ``ids`` runs (function and current line), for failure messages."""
    described = []
    for g in gc.get_objects():
        if isinstance(g, greenlet.greenlet) and id(g) in ids and not g.dead:
            frame = g.gr_frame
            where = f" at {frame.f_code.co_name}:{frame.f_lineno}" if frame is not None else ""
            described.append(f"{g!r}{where}")
    return described


def _status_bytes(*keys: str) -> list[int]:
    """The ``/proc/self/status`` fields ``keys`` (kB lines, such as ``"VmRSS"``) in bytes;
    0 for each where ``/proc`` is missing."""
    found = dict.fromkeys(keys, 0)
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                key = line.split(":", 1)[0]
                if key in found:
                    found[key] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return [found[key] for key in keys]


def rss_bytes() -> int:
    """This process's resident set size in bytes (Linux ``/proc``; 0 elsewhere)."""
    return _status_bytes("VmRSS")[0]


def rss_parts() -> tuple[int, int]:
    """This process's resident bytes as (anonymous, file-backed), from Linux ``/proc``.

    Anonymous memory is what the process allocated (heap, stacks, arenas);
    file-backed is the pages of its mapped files (the interpreter, shared
    libraries) it has touched so far, which grows when a code path runs for
    the first time. (0, 0) elsewhere.
    """
    anon, mapped = _status_bytes("RssAnon", "RssFile")
    return anon, mapped


def open_fds() -> int:
    """How many file descriptors this process has open (Linux ``/proc``; -1 elsewhere)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return -1


@dataclass(slots=True)  # a soak keeps minutes of them: a third of the size of a dict's
class Handling:
    """One completed handler run: the message id, its connection, and how it ended."""

    message_id: str
    connection: Any
    outlived: bool  # the handler returned after nsqd's message timeout
    fin_sent: bool  # Message.finish() said it sent FIN
    spare: float = 0.0  # seconds of the message timeout left (by the client's clock) at FIN


@dataclass
class DeliveryLedger:
    """The books of a fault run: what was acknowledged and what was handled.

    Keys are the message numbers a run publishes (its bodies, counting from
    0). A *duplicate delivery* is a message id handled more than once; a
    *republish* is a number handled under two ids (the producer sent it
    twice after a connection died before nsqd's answer: at-least-once).
    A long run calls :meth:`settle` now and then so the books stay small.
    """

    acked: set[int] = field(default_factory=set)
    unacked: int = 0  # publishes that raised (they may or may not have been stored)
    handlings: dict[int, list[Handling]] = field(default_factory=dict)
    #: The highest ``attempts`` each number was delivered with (unsettled ones):
    #: tells a message nsqd never delivered from one the client did not complete.
    deliveries: dict[int, int] = field(default_factory=dict)
    #: Numbers handed to the consumer's give-up hook (past ``max_attempts``),
    #: with the attempts they had: accounted for, not lost.
    given_up: dict[int, int] = field(default_factory=dict)
    failures: int = 0  # handler runs that raised (requeued, not handled)
    #: The longest the network may hold a message on its way (a stall, a
    #: delay): nsqd's timeout runs from when it sent, ours from when it came.
    transit: float = 0.0
    #: Message ids nsqd answered ``E_FIN_FAILED`` for (it had timed them out).
    fin_failed: set[str] = field(default_factory=set)
    settled_handlings: int = 0
    settled_acked: int = 0
    settled_given_up: int = 0
    #: Every number below it is settled, but those still in ``acked`` or in
    #: ``_unacked_open`` (not handled yet): the books stay flat, however long the run.
    _below: int = 0
    _unacked_open: set[int] = field(default_factory=set)
    _settled_dups: collections.Counter[str] = field(default_factory=collections.Counter)

    def server_error(self, conn: object, error: Exception) -> None:
        """Record a consumer's non-fatal server error (pass as its error observer)."""
        words = str(error).split()
        if len(words) >= 3 and words[0] == "E_FIN_FAILED":
            self.fin_failed.add(words[2])

    def ack(self, number: int) -> None:
        """nsqd acknowledged the publish of ``number``."""
        self.acked.add(number)

    def publish_failed(self, number: int) -> None:
        """The publish of ``number`` raised: nsqd may or may not have stored it."""
        self.unacked += 1
        self._unacked_open.add(number)

    def delivered(self, number: int, attempts: int) -> None:
        """A handler started on ``number``, delivered for the ``attempts``-th time."""
        if attempts > self.deliveries.get(number, 0):
            self.deliveries[number] = attempts

    def gave_up(self, message: Message) -> None:
        """A consumer's ``on_giving_up`` hook: record the number (then it is finished)."""
        self.given_up[int(message.body)] = message.attempts

    def handled(self, number: int, handling: Handling) -> None:
        """A handler completed on ``number``."""
        if self._is_settled(number):
            self.settled_handlings += 1
            self._settled_dups["late"] += 1
            return
        self.handlings.setdefault(number, []).append(handling)

    @property
    def acked_count(self) -> int:
        """Acknowledged publishes, settled ones included."""
        return len(self.acked) + self.settled_acked

    @property
    def handled_count(self) -> int:
        """Completed handler runs, duplicates and settled ones included."""
        return sum(len(h) for h in self.handlings.values()) + self.settled_handlings

    def lost(self) -> list[int]:
        """Acknowledged numbers neither handled nor given up (must be empty at the end)."""
        return sorted(self.acked.difference(self.handlings, self.given_up))

    def explain_lost(self, limit: int = 10) -> str:
        """The first ``limit`` lost numbers, each with what was seen of it.

        ``never delivered``: no handler ever started on it (nsqd did not send
        it, or the client dropped it unstarted); ``delivered N times``: a
        handler started on it (the highest attempts seen) but none completed.
        """
        parts = []
        for number in self.lost()[:limit]:
            attempts = self.deliveries.get(number)
            seen = f"delivered, attempts up to {attempts}" if attempts else "never delivered"
            parts.append(f"{number} ({seen})")
        return ", ".join(parts) or "none"

    def settle(self, below: int) -> None:
        """Fold the handled numbers below ``below`` into counters, to keep memory flat.

        A later handling of a settled number counts as a ``late`` duplicate.
        The given-up numbers below ``below`` and the ``E_FIN_FAILED`` ids of
        the settled handlings are folded too (``given_up`` and ``fin_failed``
        keep the unsettled ones only).
        """
        for number in [n for n in self.deliveries if n < below]:
            del self.deliveries[number]
        for number in [n for n in self.handlings if n < below]:
            runs = self.handlings.pop(number)
            self._settled_dups.update(_causes(runs, self.transit, self.fin_failed))
            self.settled_handlings += len(runs)
            self.fin_failed.difference_update(run.message_id for run in runs)
            self._settle_number(number)
        for number in [n for n in self.given_up if n < below]:
            del self.given_up[number]
            self.settled_given_up += 1
            self._settle_number(number)
        self._below = max(self._below, below)

    def _settle_number(self, number: int) -> None:
        if number in self.acked:
            self.acked.discard(number)
            self.settled_acked += 1
        self._unacked_open.discard(number)

    def _is_settled(self, number: int) -> bool:
        return (
            number < self._below and number not in self.acked and number not in self._unacked_open
        )

    def duplicates(self) -> dict[str, int]:
        """Every handling beyond the first, by cause.

        ``timed_out``: nsqd timed one of the two deliveries out before its
        FIN reached it (and redelivered it): its handler outlived the
        timeout, or finished within ``transit`` seconds of it, or nsqd
        answered ``E_FIN_FAILED`` (the network held the message or the FIN).
        The delivery that timed out may be the one that completed second
        (a slow handler still running when its quick redelivery finished);
        ``connection_lost``: the earlier run's
        connection ended with an error, so its FIN was not sent or was lost
        with the connection; ``republished``: a second id for the same number
        (producer retry); ``late``: after :meth:`settle` folded the number;
        ``unexplained``: none of these (must be 0).
        """
        causes = collections.Counter(self._settled_dups)
        for runs in self.handlings.values():
            causes.update(_causes(runs, self.transit, self.fin_failed))
        for key in ("timed_out", "connection_lost", "republished", "late", "unexplained"):
            causes.setdefault(key, 0)
        return dict(causes)

    def summary(self) -> str:
        """One line: acknowledged, handled, lost, duplicates by cause."""
        dups = self.duplicates()
        return (
            f"acked {self.acked_count} (+{self.unacked} unacked) handled {self.handled_count}"
            f" lost {len(self.lost())} given up {len(self.given_up) + self.settled_given_up}"
            f" duplicates {sum(dups.values())} {dups} failures {self.failures}"
        )


def _causes(runs: list[Handling], transit: float, fin_failed: set[str]) -> collections.Counter[str]:
    """Why each handling of one number beyond its first happened."""
    causes: collections.Counter[str] = collections.Counter()
    seen: dict[str, Handling] = {}
    for run in runs:
        earlier = seen.get(run.message_id)
        if earlier is None:
            if seen:
                causes["republished"] += 1
        elif run.message_id in fin_failed or any(_timed_out(h, transit) for h in (earlier, run)):
            # Either delivery may be the one nsqd timed out: handlings are
            # listed as they completed, so a slow first delivery completes
            # after the quick redelivery it caused.
            causes["timed_out"] += 1
        elif not earlier.fin_sent or getattr(earlier.connection, "error", None) is not None:
            causes["connection_lost"] += 1
        else:
            causes["unexplained"] += 1
        seen[run.message_id] = run
    return causes


def _timed_out(handling: Handling, transit: float) -> bool:
    """Whether nsqd may have timed this delivery out before its FIN arrived."""
    return handling.outlived or handling.spare <= transit


class Books(Protocol):
    """What :class:`AccountingHandler` records into: a :class:`DeliveryLedger`, or the
    :class:`~gnsqlite.testing.ledger_process.LedgerProcess` that keeps one in a child."""

    failures: int

    def delivered(self, number: int, attempts: int) -> None: ...

    def handled(self, number: int, handling: Handling) -> None: ...


class AccountingHandler:
    """A consumer handler that records into ``ledger`` and misbehaves at seeded rates.

    The body must be a decimal number. With probability ``fail_rate`` the
    handler raises (the consumer requeues; not a handling); with
    ``slow_rate`` it sleeps past the message timeout by ``overstay``
    seconds; otherwise it sleeps ``work`` seconds (a range). It then
    finishes the message itself and records whether FIN could be sent.
    ``slow`` counts the handlers that outlived their timeout.
    """

    def __init__(
        self,
        ledger: Books,
        rng: random.Random,
        fail_rate: float = 0.0,
        slow_rate: float = 0.0,
        overstay: float = 0.3,
        work: tuple[float, float] = (0.0, 0.002),
    ) -> None:
        self.ledger = ledger
        self.rng = rng
        self.fail_rate = fail_rate
        self.slow_rate = slow_rate
        self.overstay = overstay
        self.work = work
        self.slow = 0
        self.running = 0

    def __call__(self, message: Message) -> None:
        number = int(message.body)
        self.ledger.delivered(number, message.attempts)
        roll = self.rng.random()
        self.running += 1
        try:
            if roll < self.fail_rate:
                self.ledger.failures += 1
                raise RuntimeError(f"injected handler failure on {number}")
            if roll < self.fail_rate + self.slow_rate:
                self.slow += 1
                gevent.sleep(message.time_left() + self.overstay)
            else:
                gevent.sleep(self.rng.uniform(*self.work))
        finally:
            self.running -= 1
        spare = message.time_left()
        sent = message.finish()
        handling = Handling(message.id, message.connection, spare == 0.0, sent, spare)
        self.ledger.handled(number, handling)


#: The faults :class:`FaultInjector` picks from.
FAULTS = ("cut", "half_close_client", "half_close_server", "stall", "delay", "restart")


class FaultInjector:
    """Applies one seeded random fault at a time to ``proxies`` (and ``restart``).

    ``restart`` (optional) restarts the broker on the same ports and data;
    ``weights`` maps a fault name of :data:`FAULTS` to its relative weight
    (default: equal, ``restart`` only when given). ``stall_for`` and
    ``delay_for`` are how long a stall or a delay lasts, in seconds.
    :meth:`inject` blocks the calling greenlet for as long as the fault
    lasts; ``counts`` says how many of each were applied.
    """

    def __init__(
        self,
        proxies: Sequence[FaultProxy],
        rng: random.Random,
        restart: Callable[[], None] | None = None,
        weights: dict[str, float] | None = None,
        stall_for: float = 0.5,
        delay_for: float = 0.5,
        delay: float = 0.05,
    ) -> None:
        self.proxies = list(proxies)
        self.rng = rng
        self.restart = restart
        default = {name: 1.0 for name in FAULTS if name != "restart" or restart is not None}
        self.weights = default if weights is None else dict(weights)
        unknown = set(self.weights) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}: choose from {FAULTS}")
        if "restart" in self.weights and restart is None:
            raise ValueError("the 'restart' fault needs restart=")
        self.stall_for = stall_for
        self.delay_for = delay_for
        self.delay = delay
        self.counts: collections.Counter[str] = collections.Counter()

    def inject(self) -> str:
        """Pick a fault and apply it (blocks while it lasts); returns its name."""
        names = sorted(self.weights)
        name = self.rng.choices(names, [self.weights[n] for n in names])[0]
        proxy = self.rng.choice(self.proxies)
        if name == "cut":
            proxy.cut()
        elif name == "half_close_client":
            proxy.half_close("client")
        elif name == "half_close_server":
            proxy.half_close("server")
        elif name == "stall":
            proxy.stall()
            gevent.sleep(self.stall_for)
            proxy.resume()
        elif name == "delay":
            proxy.delay(self.delay)
            gevent.sleep(self.delay_for)
            proxy.delay(0.0)
        elif name == "restart" and self.restart is not None:
            self.restart()
        self.counts[name] += 1
        return name
