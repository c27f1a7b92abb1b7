"""pynsq's ``Writer`` on a gnsqlite :class:`~gnsqlite.producer.Producer`.

The Producer owns the connections (connecting, heartbeats, reconnecting);
each ``pub``/``mpub``/``dpub`` goes, as in pynsq, to one open connection
picked at random and is not retried elsewhere. The callback gets
``(conn, data)``: ``conn`` a :class:`~gnsqlite.nsq.conns.ConnectionView`
(``None`` when nothing was sent), ``data`` ``b"OK"`` or an
:class:`~gnsqlite.nsq.Error`. With no open connection the callback gets a
:class:`~gnsqlite.nsq.SendError` at once, in the caller's greenlet; answers
from nsqd reach callbacks in a greenlet of the Writer, in the order they
arrive. A callback may block (it delays the callbacks after it).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Generator, Iterable
from typing import Any

import gevent
import gevent.event
import gevent.pool
import gevent.queue

from ..connection import Connection
from ..errors import ConfigError, NoConnectionsError, NSQConnectionError
from ..producer import Producer
from . import runner, tornado_bridge
from .conn import AsyncConn
from .conns import ConnectionView
from .errors import Error, SendError, as_nsq_error, pynsq_arguments
from .options import check_keywords, connection_config

__all__ = ["AsyncConn", "Callback", "PublishResult", "Writer", "make_exc_future"]

log = logging.getLogger(__name__)
logger = log  # pynsq's name

Callback = Callable[[Any, Any], Any]


class PublishResult:
    """The outcome of one ``pub``/``mpub``/``dpub``: nsqd's answer or the error.

    Awaitable on the program's asyncio loop (tornado's IOLoop): ``await``
    gives ``b"OK"`` or raises the :class:`~gnsqlite.nsq.Error`. It is
    settled after the publish's callback ran.
    """

    def __init__(self) -> None:
        self._result: gevent.event.AsyncResult[bytes] = gevent.event.AsyncResult()

    def __repr__(self) -> str:
        state = "pending" if not self.done() else ("failed" if self.exception() else "OK")
        return f"<nsq.PublishResult {state}>"

    def done(self) -> bool:
        """Whether nsqd answered (or the publish failed)."""
        return self._result.ready()

    def result(self, timeout: float | None = None) -> bytes:
        """nsqd's answer; raises the publish's error. Blocks the calling greenlet."""
        return self._result.get(timeout=timeout) or b""

    def exception(self) -> BaseException | None:
        """The publish's error once it failed, else ``None``. Does not block."""
        return self._result.exception if self._result.ready() else None

    def add_done_callback(self, callback: Callable[[PublishResult], Any]) -> None:
        """Call ``callback(self)`` when the outcome is known (at once if it is)."""
        self._result.rawlink(lambda _: callback(self))

    def __await__(self) -> Generator[Any, None, bytes]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bytes] = loop.create_future()

        def copy(_: Any) -> None:
            if future.done():
                return
            error = self._result.exception
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(bytes(self._result.value or b""))

        if self._result.ready():
            copy(None)
        else:
            self._result.rawlink(lambda done: loop.call_soon(copy, done))
        return (yield from future.__await__())

    def _settle(self, data: Any) -> None:
        if isinstance(data, BaseException):
            self._result.set_exception(data)
        else:
            self._result.set(data)


def make_exc_future(exc: BaseException) -> PublishResult:
    """A :class:`PublishResult` that has already failed with ``exc`` (as pynsq's helper)."""
    result = PublishResult()
    result._settle(exc)
    return result


_Job = tuple[Callback | None, str, str, ConnectionView | None, Any, PublishResult]


class Writer:
    """Publishes to the nsqd at ``nsqd_tcp_addresses``, as pynsq's ``nsq.Writer`` does.

    ``reconnect_interval`` (seconds) paces reconnection after a connection
    fails; ``**kwargs`` are pynsq's connection keywords in pynsq's units
    (see :mod:`gnsqlite.nsq.options`). The constructor opens nothing;
    :func:`~gnsqlite.nsq.run` (or :meth:`start`) connects. ``writer.producer``
    is the gnsqlite Producer underneath, for blocking publishes.
    """

    #: :func:`~gnsqlite.nsq.run` closes Readers before Writers.
    close_order = 1
    #: Seconds :meth:`close` waits by default for nsqd's answers.
    close_timeout = 5.0

    def __init__(
        self,
        nsqd_tcp_addresses: str | Iterable[str],
        reconnect_interval: float = 15.0,
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        with pynsq_arguments("Writer"):
            check_keywords("Writer", kwargs)
            if isinstance(nsqd_tcp_addresses, str):
                nsqd_tcp_addresses = [nsqd_tcp_addresses]
            self.nsqd_tcp_addresses = list(nsqd_tcp_addresses)
            if not self.nsqd_tcp_addresses:
                raise ConfigError("nsqd_tcp_addresses is empty: give at least one 'host:port'")
            self.name = name or self.nsqd_tcp_addresses[0]
            self.reconnect_interval = reconnect_interval
            #: pynsq's connection keywords, as given.
            self.conn_kwargs = dict(kwargs)
            options = {k: v for k, v in kwargs.items() if k != "requeue_delay"}
            self.producer = Producer(
                self.nsqd_tcp_addresses,
                connection_config=connection_config(options),
                reconnect_interval=reconnect_interval,
                max_reconnect_interval=reconnect_interval,
            )
        self._jobs: gevent.queue.Queue[_Job | None] = gevent.queue.Queue()
        self._greenlets = gevent.pool.Group()
        self._pending = 0
        self._idle = gevent.event.Event()
        self._idle.set()
        self._skip_wait = gevent.event.Event()
        self._started = False
        self._closed = False
        runner.register(self)
        tornado_bridge.schedule_start(self.start)

    def __repr__(self) -> str:
        return f"<nsq.Writer {self.name}>"

    # -- lifecycle -------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether :meth:`start` ran."""
        return self._started

    def start(self) -> None:
        """Connect; blocks until each nsqd connected or failed once (up to 5 s).

        :func:`~gnsqlite.nsq.run` calls it; not in pynsq.
        """
        if self._started or self._closed:
            return
        self._started = True
        self._greenlets.spawn(self._run_callbacks)
        self.producer.start()

    def close(self, timeout: float | None = None) -> asyncio.Future[None] | None:
        """Wait up to ``timeout`` seconds for nsqd to answer what was sent, then close.

        ``timeout`` defaults to :attr:`close_timeout` (5 s);
        :meth:`skip_close_wait` ends the wait early. Callbacks of publishes
        still unanswered then get a ``ConnectionClosedError``; every
        callback has run when this returns. Safe to call twice. (pynsq's
        Writer has no ``close()``.) Called from a coroutine of an asyncio
        loop the program runs, it returns a Future instead of blocking the
        loop, as :meth:`Reader.close` does: ``await writer.close()``.
        """
        return tornado_bridge.off_the_loop(lambda: self._close(timeout))

    def _close(self, timeout: float | None) -> None:
        if self._closed:
            return
        self._closed = True
        timeout = self.close_timeout if timeout is None else timeout
        gevent.wait([self._idle, self._skip_wait], timeout=timeout, count=1)
        self.producer.close()
        self._idle.wait(1.0)  # the failures of what was left reach the queue
        self._jobs.put(None)
        self._greenlets.join(timeout=max(1.0, timeout))
        self._greenlets.kill(block=True)
        runner.unregister(self)

    def pending(self) -> int:
        """How many publishes still wait for nsqd's answer. Does not block. Not in pynsq."""
        return self._pending

    def skip_close_wait(self) -> int:
        """Make a :meth:`close` under way (or the next one) stop waiting for answers.

        The publishes still unanswered then fail with ``ConnectionClosedError``
        (their callbacks say so); nsqd may still have taken them. Returns how
        many there were; does not block. Not in pynsq.
        """
        self._skip_wait.set()
        return self._pending

    @property
    def conns(self) -> dict[str, ConnectionView]:
        """The open connections by ``"host:port"``."""
        return {c.name: ConnectionView(c) for c in self.producer.connections}

    # -- publishing ------------------------------------------------------------

    def pub(self, topic: str, msg: bytes | str, callback: Callback | None = None) -> PublishResult:
        """PUB ``msg`` to ``topic``; ``callback(conn, data)`` gets the answer. Does not block."""
        with pynsq_arguments("pub"):
            return self._send("pub", topic, 1, callback, lambda c: c.publish(topic, msg))

    def mpub(
        self, topic: str, msg: bytes | str | Iterable[bytes | str], callback: Callback | None = None
    ) -> PublishResult:
        """MPUB the list of bodies ``msg`` (or one body) to ``topic``. Does not block."""
        bodies = [msg] if isinstance(msg, (bytes, str)) else list(msg)
        with pynsq_arguments("mpub"):
            return self._send(
                "mpub", topic, len(bodies), callback, lambda c: c.multi_publish(topic, bodies)
            )

    def dpub(
        self, topic: str, delay_ms: int, msg: bytes | str, callback: Callback | None = None
    ) -> PublishResult:
        """DPUB: deliver ``msg`` after ``delay_ms`` **milliseconds**. Does not block."""
        with pynsq_arguments("dpub"):
            if isinstance(delay_ms, bool) or not isinstance(delay_ms, (int, float)):
                raise TypeError(f"delay_ms must be a number of milliseconds, not {delay_ms!r}")
            delay = delay_ms / 1000.0
            return self._send(
                "dpub", topic, 1, callback, lambda c: c.deferred_publish(topic, delay, msg)
            )

    def _send(
        self,
        command: str,
        topic: str,
        messages: int,
        callback: Callback | None,
        request: Callable[[Connection], gevent.event.AsyncResult[bytes]],
    ) -> PublishResult:
        # Every publish is counted in the Producer's stats(), as its own are.
        producer = self.producer
        outcome = PublishResult()
        conns = list(producer.connections) if not self._closed else []
        if not conns:
            failed = NoConnectionsError({}, "no open connections")
            producer.count_publish(topic, command, messages, None, failed)
            self._call(callback, command, topic, None, SendError("no open connections"), outcome)
            return outcome
        conn = random.choice(conns)
        view = ConnectionView(conn)
        started = time.monotonic()
        try:
            result = request(conn)
        except NSQConnectionError as exc:
            producer.count_publish(topic, command, messages, None, exc)
            self._call(callback, command, topic, view, SendError("send error", exc), outcome)
            return outcome
        self._pending += 1
        self._idle.clear()
        producer.track_in_flight(1)

        def answered(done: gevent.event.AsyncResult[bytes]) -> None:  # runs in the hub
            error = done.exception
            producer.track_in_flight(-1)
            producer.count_publish(topic, command, messages, started, error)
            data = done.value if error is None else as_nsq_error(error)
            self._jobs.put((callback, command, topic, view, data, outcome))

        result.rawlink(answered)
        return outcome

    # -- callbacks -------------------------------------------------------------

    def _run_callbacks(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            self._pending -= 1
            try:
                self._call(*job)
            finally:
                if self._pending == 0:
                    self._idle.set()

    def _call(
        self,
        callback: Callback | None,
        command: str,
        topic: str,
        conn: ConnectionView | None,
        data: Any,
        outcome: PublishResult,
    ) -> None:
        if callback is None:
            if isinstance(data, Error):
                log.error("[%s] failed to %s to %s: %s", conn or "NA", command, topic, data)
        else:
            try:
                callback(conn, data)
            except Exception:
                log.exception("[%s] %s callback failed", conn or "NA", command)
        outcome._settle(data)
