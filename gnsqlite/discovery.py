"""Finding nsqd through nsqlookupd: one poll (:class:`LookupdPoller`), and the polling loop.

Each lookupd answers for the nsqd registered with it; lookupds do not share
what they know, so the answers are united, keyed by
``broadcast_address:tcp_port`` as the client-library guide asks. A lookupd
that fails is logged and skipped; the poll fails only when all of them do.

:class:`Discovery` is the one polling loop, the Consumer's and the
Producer's: a poll at start, then one every ``interval`` seconds stretched by
a random ``jitter`` fraction (so that many clients do not ask at once), an
extra poll on demand (:meth:`Discovery.query`) that replaces the next one,
and after a poll where every lookupd failed the next one on the reconnect
policy's backoff, never later than the regular one. Each answer, its
addresses normalised (a bad one is logged and skipped), goes to the
owner's ``on_found``; a failed poll calls nothing, so what was found before
stands.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable

import gevent.event
import gevent.pool

from .errors import NoConnectionsError, NSQError
from .flow import Reconnect
from .http import LookupdClient
from .net import normalize_address
from .timers import Timer, TimerWheel

__all__ = ["Discovery", "LookupdPoller"]

log = logging.getLogger(__name__)

#: The reconnect policy's key for lookupd polls (an nsqd address always has a ':').
RECONNECT_KEY = "lookupd"


class LookupdPoller:
    """Polls ``lookupd_http_addresses`` (``"host:port"``) for the nsqd of ``topic``.

    ``topic=None`` asks for every nsqd (``/nodes``); with a topic,
    ``fallback_to_nodes`` asks for every nsqd when no lookupd lists one for
    the topic (a producer's first publish creates the topic where it lands).
    ``request_timeout`` bounds each HTTP request, in seconds.
    """

    def __init__(
        self,
        topic: str | None,
        lookupd_http_addresses: Iterable[str],
        request_timeout: float = 2.0,
        *,
        fallback_to_nodes: bool = False,
    ) -> None:
        self.topic = topic
        self.fallback_to_nodes = fallback_to_nodes
        self.clients = [LookupdClient(a, timeout=request_timeout) for a in lookupd_http_addresses]

    def poll(self) -> set[str]:
        """The union of nsqd ``"host:port"`` addresses; blocks the calling greenlet.

        Raises :class:`~gnsqlite.errors.NoConnectionsError` only when every
        lookupd failed.
        """
        topic = self.topic
        if topic is not None:
            found = self._ask(lambda client: client.producer_addresses(topic), f"topic {topic!r}")
            if found or not self.fallback_to_nodes:
                return found
        return self._ask(LookupdClient.node_addresses, "nodes")

    def _ask(self, question: Callable[[LookupdClient], list[str]], what: str) -> set[str]:
        found: set[str] = set()
        errors: dict[str, BaseException] = {}
        for client in self.clients:
            try:
                found.update(question(client))
            except Exception as exc:  # any failure, a malformed answer too, skips this lookupd
                errors[client.address] = exc
                log.warning("lookupd %s failed for %s: %s", client.address, what, exc)
        if errors and len(errors) == len(self.clients):
            raise NoConnectionsError(errors, "every lookupd failed")
        return found


class Discovery:
    """Polls lookupd with ``poller`` for as long as it runs; see the module docstring.

    ``interval`` (seconds) and ``jitter`` (a fraction of it, 0 to 1) space
    the polls; ``reconnect`` (shared with the owner's connections: its key
    is :data:`RECONNECT_KEY`) spaces them after failures; ``rng`` draws the
    jitter. ``on_found(addresses)`` gets each answer (a set of normalised
    ``"host:port"``, maybe empty) in the polling greenlet: it must not
    block. ``owner`` owns the poll timer (its ``cancel_owner`` cancels it);
    ``name`` is what log lines call the owner. The constructor opens nothing
    and starts nothing; :meth:`close` ends the polling greenlet and timer.
    """

    def __init__(
        self,
        poller: LookupdPoller,
        interval: float,
        jitter: float,
        reconnect: Reconnect,
        rng: random.Random,
        on_found: Callable[[set[str]], None],
        owner: object,
        name: object = "discovery",
    ) -> None:
        self.poller = poller
        self.interval = interval
        self.jitter = jitter
        self._reconnect = reconnect
        self._rng = rng
        self._on_found = on_found
        self._owner = owner
        self._name = name
        #: Polls that got an answer, and polls where every lookupd failed.
        self.polls = 0
        self.failed_polls = 0
        #: The error of the last poll, ``None`` after one that got an answer.
        self.last_error: NSQError | None = None
        #: Set once the first poll ended, answered or failed.
        self.first_poll = gevent.event.Event()
        self._group = gevent.pool.Group()
        self._timer: Timer | None = None
        self._wheel: TimerWheel | None = None
        self._closed = False

    @property
    def lookupd_addresses(self) -> list[str]:
        """The lookupd asked (``"host:port"``)."""
        return [client.address for client in self.poller.clients]

    def start(self, wheel: TimerWheel) -> None:
        """Poll now in the background, then on schedule (timers on ``wheel``). Does not block."""
        if self._closed or self._wheel is not None:
            return
        self._wheel = wheel
        self._group.spawn(self._poll)

    def query(self) -> None:
        """Poll now, in the background; it replaces the next scheduled poll. Does not block."""
        if not self._closed and self._wheel is not None:
            self._group.spawn(self._poll)

    def close(self) -> None:
        """Stop polling: cancel the next poll, end a running one (blocks until it ended)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._group.kill(block=True)
        self.first_poll.set()  # nobody waits for a poll that will not come

    def join(self, timeout: float | None = None) -> bool:
        """Block until no poll runs; ``True`` if none does."""
        return bool(self._group.join(timeout=timeout))

    def _poll(self) -> None:
        """One poll (in a greenlet of the group), then the next one is scheduled."""
        if self._closed:
            return
        delay = self.interval * (1.0 + self._rng.uniform(0.0, self.jitter))
        try:
            found = self.poller.poll()
        except NSQError as exc:
            # Every lookupd failed: ask again on the reconnect policy, never
            # later than the regular poll would.
            delay = min(delay, self._reconnect.failed(RECONNECT_KEY))
            self.failed_polls += 1
            self.last_error = exc
            log.warning(
                "%s: lookupd poll failed: %s; polling again in %.2f s", self._name, exc, delay
            )
            found = None
        else:
            self._reconnect.succeeded(RECONNECT_KEY)
            self.polls += 1
            self.last_error = None
        self._schedule(delay)
        try:
            if found is not None:
                self._on_found(self._normalized(found))
        finally:
            self.first_poll.set()

    def _normalized(self, found: Iterable[str]) -> set[str]:
        names = set()
        for address in sorted(found):
            try:
                names.add(normalize_address(address))
            except ValueError:
                log.warning("%s: lookupd listed a bad address %r", self._name, address)
        return names

    def _schedule(self, delay: float) -> None:
        if self._wheel is None or self._closed:
            return
        if self._timer is not None:
            self._timer.cancel()  # an extra poll (query) replaces the next one
        self._timer = self._wheel.call_later(
            delay, self._group.spawn, self._poll, owner=self._owner
        )
