"""pynsq's ``Reader`` on a gnsqlite :class:`~gnsqlite.consumer.Consumer`.

The constructor takes pynsq's arguments and units and opens nothing;
:func:`~gnsqlite.nsq.run` (or :meth:`Reader.start`) starts it. Each message
goes through pynsq's hooks, in a handler greenlet of the Consumer:
``giving_up`` when its attempts exceed ``max_tries``, then
``preprocess_message``, ``validate_message`` and ``process_message`` (which
calls ``message_handler``). The handler's answer means what it means in
pynsq: ``True`` finishes, ``False`` requeues, an exception requeues with
backoff, ``message.enable_async()`` leaves the answer to the program. A
handler that returns ``None`` without going async (which leaves the message
hanging in pynsq) gets a warning and its message is requeued. A handler that
returns a coroutine (``async def``), a tornado or asyncio Future, or any
awaitable is awaited, its handler greenlet held meanwhile, and what it
resolves to decides as above (pynsq's rule: truthy finishes, anything else
requeues, an exception requeues with backoff); see
:mod:`gnsqlite.nsq.tornado_bridge` for the loop it runs on.

RDY, backoff, lookupd polling and reconnection are the Consumer's.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import gevent
import gevent.event
import gevent.pool

from ..connection import Connection
from ..consumer import Consumer
from ..errors import ConfigError
from ..message import Message as _Delivered
from ..net import normalize_address
from ..timers import TimerWheel
from . import event, runner, tornado_bridge
from .backoff_timer import BackoffTimer
from .conn import AsyncConn
from .conns import ConnectionView
from .errors import pynsq_arguments
from .message import Message
from .options import check_keywords, connection_config

__all__ = ["AsyncConn", "BackoffTimer", "Reader"]

log = logging.getLogger(__name__)
logger = log  # pynsq's name

#: Ceiling of the REQ delay computed from ``requeue_delay`` (nsqd's default
#: ``--max-req-timeout``); pynsq does not cap it.
MAX_REQUEUE_DELAY = 3600.0
#: Seconds between two calls of an overridden :meth:`Reader.disabled`.
DISABLED_CHECK_INTERVAL = 1.0
#: gnsqlite's own Consumer options a Reader passes on as given (pynsq has none of them).
_DEAD_LETTER_KEYWORDS = (
    "dead_letter_topic",
    "dead_letter_envelope",
    "dead_letter_nsqd",
    "dead_letter_timeout",
)
#: gnsqlite's lease extension and message age (issue 39), passed on as given.
_AGE_KEYWORDS = ("max_lease", "max_age")
_PASSED_ON = (*_DEAD_LETTER_KEYWORDS, *_AGE_KEYWORDS)
_EXTRA_KEYWORDS = ("concurrency", *_PASSED_ON)


class _ReaderConsumer(Consumer):
    """The Consumer behind a Reader: every message goes to the Reader's hooks."""

    def __init__(self, reader: Reader, *args: Any, **kwargs: Any) -> None:
        self.reader = reader
        #: The greenlets running the Reader's ``heartbeat`` hook; killed by ``Reader.close``.
        self.hooks = gevent.pool.Group()
        super().__init__(*args, **kwargs)

    def handle(self, message: _Delivered) -> Any:
        return self.reader._handle(message)

    def on_heartbeat(self, conn: Connection) -> None:
        if type(self.reader).heartbeat is not Reader.heartbeat:  # overridden: never in the reader
            self.hooks.spawn(self.reader.heartbeat, ConnectionView(conn))


class Reader:
    """Consumes ``topic`` on ``channel``, as pynsq's ``nsq.Reader`` does.

    Durations are seconds (``lookupd_poll_interval``,
    ``low_rdy_idle_timeout``, ``max_backoff_duration``,
    ``lookupd_request_timeout``); ``max_tries=0`` retries forever;
    ``lookupd_connect_timeout`` is accepted for compatibility (the request
    timeout bounds the whole lookup). ``**kwargs`` are pynsq's connection
    keywords in pynsq's units (see :mod:`gnsqlite.nsq.options`), plus
    ``concurrency``: how many handlers run at once (default
    ``max_in_flight``; ``1`` runs them one at a time, as pynsq does), and
    the dead-letter options ``dead_letter_topic``, ``dead_letter_envelope``,
    ``dead_letter_nsqd``, ``dead_letter_timeout`` (seconds) of the Consumer
    (:mod:`gnsqlite.deadletter`): a message past ``max_tries`` is published
    there, then :meth:`giving_up` runs, then it is finished; if the publish
    fails it is requeued and :meth:`giving_up` waits for a later delivery.
    An envelope's ``error`` is the exception ``process_message`` raised on
    the last try (``null`` when it returned ``False`` instead). ``max_lease``
    and ``max_age`` (seconds) are the Consumer's too: a message is touched
    while ``process_message`` runs, up to ``max_lease`` after its delivery
    (default: as long as nsqd allows; ``0``: never, as pynsq), and one
    older than ``max_age`` is finished (or dead-lettered) unhandled
    (``docs/consuming.md``).

    ``reader.consumer`` is the gnsqlite Consumer underneath
    (``reader.consumer.stats()``).
    """

    #: :func:`~gnsqlite.nsq.run` closes Readers before Writers.
    close_order = 0
    #: Seconds :meth:`close` waits by default for the handlers' answers.
    close_timeout = 30.0

    def __init__(
        self,
        topic: str,
        channel: str,
        message_handler: Callable[[Message], Any] | None = None,
        name: str | None = None,
        nsqd_tcp_addresses: str | Iterable[str] | None = None,
        lookupd_http_addresses: str | Iterable[str] | None = None,
        max_tries: int = 5,
        max_in_flight: int = 1,
        lookupd_poll_interval: float = 60,
        low_rdy_idle_timeout: float = 10,
        max_backoff_duration: float = 128,
        lookupd_poll_jitter: float = 0.3,
        lookupd_connect_timeout: float = 1,
        lookupd_request_timeout: float = 2,
        **kwargs: Any,
    ) -> None:
        with pynsq_arguments("Reader"):
            check_keywords("Reader", kwargs, _EXTRA_KEYWORDS)
            for what, value in (("topic", topic), ("channel", channel)):
                if not isinstance(value, str) or not value:
                    raise ConfigError(f"{what} must be a non-empty str, not {value!r}")
            if not nsqd_tcp_addresses and not lookupd_http_addresses:
                raise ConfigError("give nsqd_tcp_addresses or lookupd_http_addresses (or both)")
            self.topic = topic
            self.channel = channel
            self.name = name or f"{topic}:{channel}"
            self.message_handler: Callable[[Message], Any] | None = None
            if message_handler is not None:
                self.set_message_handler(message_handler)
            self.max_tries = max_tries
            self.lookupd_poll_interval = lookupd_poll_interval
            self.lookupd_poll_jitter = lookupd_poll_jitter
            self.lookupd_connect_timeout = lookupd_connect_timeout
            self.lookupd_request_timeout = lookupd_request_timeout
            self.low_rdy_idle_timeout = low_rdy_idle_timeout
            self.nsqd_tcp_addresses = _as_list(nsqd_tcp_addresses)
            self.lookupd_http_addresses = _as_list(lookupd_http_addresses)
            #: pynsq's connection keywords, as given (``requeue_delay`` included).
            self.conn_kwargs = {k: v for k, v in kwargs.items() if k not in _EXTRA_KEYWORDS}
            requeue_delay = kwargs.get("requeue_delay", 90)
            options: dict[str, Any] = {
                "max_in_flight": max_in_flight,
                "max_attempts": max_tries,
                "requeue_delay": requeue_delay,
                "max_requeue_delay": max(MAX_REQUEUE_DELAY, _number(requeue_delay)),
                "max_backoff_duration": max_backoff_duration,
                "lookupd_poll_interval": lookupd_poll_interval,
                "lookupd_poll_jitter": lookupd_poll_jitter,
                "lookupd_request_timeout": lookupd_request_timeout,
                "low_rdy_idle_timeout": low_rdy_idle_timeout,
            }
            if kwargs.get("concurrency") is not None:
                options["concurrency"] = kwargs["concurrency"]
            options.update({k: kwargs[k] for k in _PASSED_ON if k in kwargs})
            self.consumer = _ReaderConsumer(
                self,
                topic,
                channel,
                nsqd_tcp_addresses=self.nsqd_tcp_addresses,
                lookupd_http_addresses=[_lookupd_address(a) for a in self.lookupd_http_addresses],
                on_giving_up=self._give_up,
                connection_config=connection_config(kwargs),
                **options,
            )
        self._max_in_flight = self.consumer.max_in_flight
        self._paused = False
        self._started = False
        self._closed = gevent.event.Event()
        #: Handlers running now, by greenlet, and the messages they were given.
        self._running: dict[Any, Message] = {}
        #: Messages a handler returned from with ``enable_async()``, not answered yet.
        self._held: dict[bytes, Message] = {}
        runner.register(self)
        tornado_bridge.schedule_start(self.start)

    def __repr__(self) -> str:
        return f"<nsq.Reader {self.name}>"

    # -- lifecycle -------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether :meth:`start` ran."""
        return self._started

    def start(self) -> None:
        """Connect and consume; does not block. :func:`~gnsqlite.nsq.run` calls it.

        Not in pynsq (its Reader starts with the IOLoop); gevent programs that
        do not use ``run()`` call it themselves.
        """
        if self._started:
            return
        if self.message_handler is None and type(self).process_message is Reader.process_message:
            raise ConfigError(
                f"{self.name}: no message handler: pass message_handler=, call"
                " set_message_handler() or override process_message()"
            )
        self._started = True
        log.info("[%s] starting reader for %s/%s", self.name, self.topic, self.channel)
        if self.disabled.__code__ is not Reader.disabled.__code__:  # overridden
            self._check_disabled()
            TimerWheel.for_hub().call_every(
                DISABLED_CHECK_INTERVAL, self._check_disabled, owner=self
            )
        self.consumer.start()

    def close(self, timeout: float | None = None) -> asyncio.Future[None] | None:
        """Stop consuming, drained; blocks up to about ``timeout`` seconds.

        In-flight handlers finish and answer, held (``enable_async()``)
        messages get their answers, for up to ``timeout`` seconds (default
        :attr:`close_timeout`, 30 s); what is left is then requeued (see
        :meth:`gnsqlite.consumer.Consumer.close`). :meth:`skip_close_wait`
        ends that wait early. pynsq's ``close()`` drops connections at once
        instead. Safe to call twice.

        Called from a coroutine of an asyncio loop the program runs
        (``asyncio.run()``), it does not block that loop, whose tasks the
        handlers may be awaiting: it returns a Future, ``await
        reader.close()``, and closes in a greenlet meanwhile.
        """
        return tornado_bridge.off_the_loop(lambda: self._close(timeout))

    def _close(self, timeout: float | None) -> None:
        TimerWheel.for_hub().cancel_owner(self)
        self.consumer.close(self.close_timeout if timeout is None else timeout)
        self.consumer.hooks.kill()
        runner.unregister(self)
        self._closed.set()

    def join(self, timeout: float | None = None) -> bool:
        """Block until the Reader was closed; ``True`` if it was within ``timeout`` s."""
        return bool(self._closed.wait(timeout))

    def pending(self) -> int:
        """How many messages :meth:`close` would wait for. Does not block.

        Those whose handler is still running (awaiting a coroutine
        included) and those held with ``enable_async()`` and not answered.
        Not in pynsq.
        """
        return len(self._unanswered())

    def skip_close_wait(self) -> int:
        """Requeue every message :meth:`close` waits for, and stop their handlers.

        Each message gets ``REQ`` with no delay and no backoff, so nsqd
        delivers it again at once (to this channel's other consumers, or
        to this one after a restart) instead of after its ``msg_timeout``;
        an answer the program gives it later does nothing. Handlers still
        running are killed (``GreenletExit``) so that a :meth:`close` under
        way returns. :func:`~gnsqlite.nsq.run` calls this on a second
        SIGINT or SIGTERM. Returns how many messages were requeued; does
        not block. Not in pynsq.
        """
        messages = self._unanswered()
        for message in messages:
            message.requeue(delay=0, backoff=False)
        current = gevent.getcurrent()
        gevent.killall([g for g in self._running if g is not current], block=False)
        return len(messages)

    def _unanswered(self) -> list[Message]:
        held = (*self._running.values(), *self._held.values())
        return [message for message in held if not message.has_responded()]

    # -- pynsq's methods and attributes ----------------------------------------

    def set_message_handler(self, message_handler: Callable[[Message], Any]) -> None:
        """Set the callable run for each message (takes effect for the next one)."""
        if not callable(message_handler):
            raise TypeError(f"message_handler must be callable, not {message_handler!r}")
        self.message_handler = message_handler

    @property
    def max_in_flight(self) -> int:
        """The RDY budget over all connections."""
        return self._max_in_flight

    @max_in_flight.setter
    def max_in_flight(self, value: int) -> None:
        self.set_max_in_flight(value)

    def set_max_in_flight(self, max_in_flight: int) -> None:
        """Change the RDY budget at run time; ``0`` pauses the Reader. Does not block."""
        self.consumer.set_max_in_flight(0 if self._paused else max_in_flight)
        self._max_in_flight = max_in_flight

    def is_starved(self) -> bool:
        """True when a connection's in-flight count reached 85% of its last RDY."""
        return self.consumer.is_starved()

    @property
    def total_rdy(self) -> int:
        """The sum of the RDY counts last sent on every connection."""
        return int(self.consumer.stats()["totals"]["rdy"])

    @property
    def conns(self) -> dict[str, ConnectionView]:
        """The subscribed connections by ``"host:port"`` (a snapshot, built per call)."""
        stats = {c["address"]: c for c in self.consumer.stats()["connections"]}
        views = {}
        for conn in self.consumer.connections:
            s = stats.get(conn.name, {})
            views[conn.name] = ConnectionView(
                conn, s.get("rdy_remaining", 0), s.get("rdy", 0), s.get("in_flight", 0)
            )
        return views

    def connect_to_nsqd(self, host: str, port: int) -> None:
        """Add the nsqd at ``host:port``; connects in the background. Does not block.

        pynsq returns the new connection; this returns ``None`` (see :attr:`conns`).
        """
        self.consumer.connect_to_nsqd(normalize_address((host, port)))

    def query_lookupd(self) -> None:
        """Ask lookupd for the topic's nsqd now, in the background. Does not block."""
        self.consumer.query_lookupd()

    # -- hooks a subclass overrides --------------------------------------------

    def process_message(self, message: Message) -> Any:
        """Handle one message; the default calls ``message_handler``."""
        if self.message_handler is None:
            raise ConfigError(f"{self.name}: no message handler")
        return self.message_handler(message)

    def heartbeat(self, conn: ConnectionView) -> None:
        """Called after each heartbeat from nsqd on ``conn``; override to observe liveness.

        Runs in a greenlet of its own (it may block); the default does nothing.
        """

    def giving_up(self, message: Message) -> None:
        """Called when ``message.attempts`` exceeds ``max_tries``; then it is finished.

        With ``dead_letter_topic``, it runs once the message is in that topic.
        """
        log.warning(
            "[%s] giving up on message %s after %d tries (max:%d) %r",
            self.name,
            message.id,
            message.attempts,
            self.max_tries,
            message.body,
        )

    def preprocess_message(self, message: Message) -> Any:
        """Transform a message before :meth:`validate_message`; the default returns it."""
        return message

    def validate_message(self, message: Any) -> bool:
        """``False`` finishes the message without handling it."""
        return True

    @classmethod
    def disabled(cls) -> bool:
        """Override to pause the Reader while it returns ``True`` (checked every second).

        pynsq deprecates it in favour of ``set_max_in_flight(0)``.
        """
        return False

    # -- machinery ---------------------------------------------------------------

    def _handle(self, delivered: _Delivered) -> None:
        """Run the hooks for one message; in a handler greenlet of the Consumer."""
        message = Message._wrap(delivered)
        me = gevent.getcurrent()
        self._running[me] = message
        try:
            self._run_hooks(message)
        finally:
            del self._running[me]
            if message.is_async() and not message.has_responded():
                self._hold(message)

    def _hold(self, message: Message) -> None:
        """Remember ``message`` until it is answered (see :meth:`pending`)."""
        self._held[message.id] = message
        message.on(event.FINISH, self._release)
        message.on(event.REQUEUE, self._release)

    def _release(self, message: Message, **_: Any) -> None:
        self._held.pop(message.id, None)

    def _run_hooks(self, message: Message) -> None:
        """``preprocess_message``, ``validate_message``, ``process_message``; then answer."""
        if not self.validate_message(self.preprocess_message(message)):
            message.finish()
            return
        result = self.process_message(message)
        if hasattr(result, "rawlink"):  # a Greenlet or AsyncResult: answer when it is done
            if not message.has_responded():
                message.enable_async()
                result.rawlink(lambda done: _answer(message, done))
            return
        if not isinstance(result, bool) and inspect.isawaitable(result):
            message.enable_async()  # as pynsq: the handler's return no longer answers
            try:
                ok = tornado_bridge.resolve(result)
            except asyncio.CancelledError:  # asyncio.run() ending cancels every task
                log.info("[%s] message %s: handler cancelled; requeued", self.name, message.id)
                message.requeue(delay=0, backoff=False)
                return
            if not ok and not message.has_responded():
                message.requeue()
            elif not message.has_responded():
                message.finish()
            return
        if message.is_async() or message.has_responded():
            return
        if result is None:
            log.warning(
                "[%s] the handler returned None for message %s without calling"
                " message.enable_async(); requeueing it. Return True to finish a"
                " message, False to requeue it.",
                self.name,
                message.id,
            )
            message.requeue(backoff=False)
        elif result:
            message.finish()
        else:
            message.requeue()

    def _give_up(self, delivered: _Delivered) -> None:
        self.giving_up(Message._wrap(delivered))

    def _check_disabled(self) -> None:
        try:
            disabled = bool(self.disabled())
        except Exception:
            log.exception("[%s] disabled() failed; treating the reader as enabled", self.name)
            disabled = False
        if disabled and not self._paused:
            log.info("[%s] disabled: pausing (RDY 0)", self.name)
            self._paused = True
            self.consumer.set_max_in_flight(0)
        elif not disabled and self._paused:
            log.info("[%s] enabled again: resuming", self.name)
            self._paused = False
            self.consumer.set_max_in_flight(self._max_in_flight)


def _answer(message: Message, done: Any) -> None:
    """Finish or requeue an async message by the value of its greenlet or result."""
    try:
        ok = done.successful() and bool(done.value)
    except Exception:
        ok = False
    if ok:
        message.finish()
    else:
        message.requeue()


def _as_list(addresses: str | Iterable[str] | None) -> list[str]:
    if not addresses:
        return []
    if isinstance(addresses, str):
        return [addresses]
    return list(addresses)


def _lookupd_address(address: str) -> str:
    """``"http://host:4161/lookup"`` or ``"host:4161"`` as ``"host:4161"``."""
    text = address if "://" in address else f"http://{address}"
    netloc = urlsplit(text).netloc
    return netloc or address


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0
