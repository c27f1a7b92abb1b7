"""The Producer: publish to one or more nsqd, pipelined, with failover.

::

    with Producer(["127.0.0.1:4150", "127.0.0.1:5150"]) as producer:
        producer.publish("clicks", b"hello")            # blocks until nsqd answers OK
        producer.multi_publish("clicks", [b"a", b"b"])  # one MPUB
        result = producer.publish_async("clicks", b"x") # an AsyncResult; does not block

Many greenlets may publish at once: requests are pipelined on each
connection and nsqd's answers are matched to them in order. Requests are
spread over the healthy connections in turn. A connection that fails is
reconnected in the background with jittered exponential backoff, and a
publish whose connection dies before nsqd answered is sent again on another
connection within the call's timeout; only when every nsqd has failed does
the call raise :class:`~gnsqlite.errors.NoConnectionsError`, naming each
address and its error.

Delivery is **at-least-once**: a retried publish may have reached the first
nsqd before its connection died, so a consumer can see a duplicate.

Sizes are checked before sending: a message above ``max_message_size``
(nsqd's ``--max-msg-size``) or an MPUB body above ``max_body_size``
(``--max-body-size``) raises :class:`~gnsqlite.errors.MessageTooLargeError`,
an empty body (which nsqd refuses too) raises
:class:`~gnsqlite.errors.LocalProtocolError`, and nothing is sent. Bodies are
``bytes``; a ``str`` is encoded as UTF-8; anything else raises ``TypeError``.

Each connection answers nsqd's heartbeats by itself (an idle producer stays
connected); one that hears nothing for two heartbeat intervals is reconnected.

Given ``lookupd_http_addresses``, the producer finds its nsqd through
nsqlookupd (alone, or besides static ``nsqd_tcp_addresses``, which it always
keeps), as a Consumer does: a poll at :meth:`Producer.start`, then every
``lookupd_poll_interval`` (jittered). Every nsqd of the cluster (``/nodes``),
or with ``lookupd_topic`` those of that topic while lookupd lists any
(``/lookup``). A newly listed nsqd joins the pool and takes its turn; one
no longer listed leaves it: no new publish goes there, and the publishes
already sent on it are answered (or, if it dies, sent again elsewhere)
before its connection closes. An answer listing no nsqd changes nothing.

``Producer.config`` is the producer's own settings (a
:class:`~gnsqlite.config.ProducerConfig`: ``timeout``, size limits,
reconnects), as ``Consumer.config`` is the consumer's;
``Producer.connection_config`` is what each connection negotiates (a
:class:`~gnsqlite.config.ConnectionConfig`).

The Producer is a façade over the objects it holds, one module each:
:mod:`~gnsqlite.producer.pool` (the connections to the nsqd, reconnects),
:mod:`~gnsqlite.producer.router` (sending, retrying, parking and giving up
publishes), :mod:`~gnsqlite.producer.deadlines` (the blocked callers'
deadlines), :mod:`~gnsqlite.producer.attempt` (one publish on its way),
:mod:`~gnsqlite.producer.requests` (the size rules) and
:mod:`~gnsqlite.producer.stats` (counters, ``stats()``, ``health()``);
the lookupd polls are :class:`gnsqlite.discovery.Discovery`'s, the Consumer's loop.
"""

from __future__ import annotations

import random
import time
import warnings
from collections.abc import Iterable, Sequence
from typing import Any, cast

import gevent
import gevent.event

from ..config import ConnectionConfig, ProducerConfig, split_options
from ..connection import Connection
from ..discovery import Discovery, LookupdPoller
from ..errors import ConfigError, ConnectionClosedError, NoConnectionsError
from ..flow import Reconnect
from ..health import Health
from ..net import normalize_addresses
from ..protocol import as_body, check_topic_name, commands, to_milliseconds
from ..protocol.commands import Body
from ..protocol.publishing import pub_bytes
from ..timers import TimerWheel
from .attempt import Attempt
from .pool import Pool
from .requests import check_body_size, check_message_size, mpub_data
from .router import Router
from .stats import PublishStats, PublishTiming, error_code, health_of

__all__ = ["Producer", "error_code"]


class Producer:
    """Publishes to the nsqd at ``nsqd_tcp_addresses`` (``"host:port"`` strings),
    and to those nsqlookupd lists at ``lookupd_http_addresses`` (HTTP ``"host:port"``).

    Give one or both kinds, at least one address. The ``lookupd_*`` options
    (``lookupd_poll_interval``, ``lookupd_poll_jitter``,
    ``lookupd_request_timeout``, ``lookupd_topic``) are keywords too, or in
    ``config``.

    ``timeout`` (seconds) bounds each blocking call, retries included.
    ``reconnect_interval`` and ``max_reconnect_interval`` (seconds) bound
    the jittered exponential backoff between reconnection attempts. Options
    left out (or ``None``) take :class:`~gnsqlite.config.ProducerConfig`'s
    defaults: 5 s, nsqd's 1 MiB message and 5 MiB body limits, 1 s and 60 s;
    or pass them all as ``config`` (a ``ProducerConfig``). Connection options
    (``heartbeat_interval``, ``tls_v1``, ``snappy``, ``auth_secret`` ...) are
    passed as keywords or as ``connection_config``.

    The constructor opens nothing; :meth:`start` connects.
    """

    def __init__(
        self,
        nsqd_tcp_addresses: str | Iterable[str] = (),
        *,
        lookupd_http_addresses: str | Iterable[str] = (),
        config: ProducerConfig | None = None,
        connection_config: ConnectionConfig | None = None,
        timeout: float | None = None,
        max_message_size: int | None = None,
        max_body_size: int | None = None,
        reconnect_interval: float | None = None,
        max_reconnect_interval: float | None = None,
        **options: Any,
    ) -> None:
        addresses = normalize_addresses("nsqd_tcp_addresses", nsqd_tcp_addresses)
        lookupd = normalize_addresses("lookupd_http_addresses", lookupd_http_addresses)
        if not addresses and not lookupd:
            raise ConfigError(
                "nsqd_tcp_addresses and lookupd_http_addresses are empty: give at least"
                " one address, nsqd_tcp_addresses=['host:4150'] or"
                " lookupd_http_addresses=['host:4161']"
            )
        if isinstance(config, ConnectionConfig):
            if connection_config is not None:
                raise ConfigError(
                    "config= is the ProducerConfig: pass one ConnectionConfig,"
                    " as connection_config="
                )
            warnings.warn(
                "Producer(config=ConnectionConfig(...)) is deprecated: config is the"
                " producer's ProducerConfig now; pass connection_config=ConnectionConfig(...)",
                DeprecationWarning,
                stacklevel=2,
            )
            config, connection_config = None, config
        producer_opts, conn_opts = split_options(
            options, (ProducerConfig, ConnectionConfig), "Producer"
        )
        if connection_config is not None and conn_opts:
            raise ConfigError(
                "pass connection options either as connection_config= or as keywords, not both"
            )
        given: dict[str, Any] = {
            "timeout": timeout,
            "max_message_size": max_message_size,
            "max_body_size": max_body_size,
            "reconnect_interval": reconnect_interval,
            "max_reconnect_interval": max_reconnect_interval,
            **producer_opts,
        }
        given = {name: value for name, value in given.items() if value is not None}
        if config is not None and given:
            raise ConfigError(
                f"pass {', '.join(sorted(given))} either in config= or as keywords, not both"
            )
        if config is not None and not isinstance(config, ProducerConfig):
            raise ConfigError(f"config= must be a ProducerConfig, not {type(config).__name__}")
        #: The producer's own settings (timeout, size limits, reconnects).
        self.config: ProducerConfig = config if config is not None else ProducerConfig(**given)
        #: What each connection negotiates with nsqd.
        self.connection_config: ConnectionConfig = (
            connection_config
            if connection_config is not None
            else ConnectionConfig.from_mapping(conn_opts)
        )
        settings = self.config
        if settings.lookupd_topic is not None and not lookupd:
            raise ConfigError(
                f"lookupd_topic={settings.lookupd_topic!r} needs lookupd_http_addresses:"
                " pass lookupd_http_addresses=['host:4161']"
            )
        #: The nsqlookupd the producer asks for nsqd (HTTP ``"host:port"``).
        self.lookupd_http_addresses: tuple[str, ...] = lookupd
        rng = random.Random()
        reconnect = Reconnect(settings.reconnect_interval, settings.max_reconnect_interval, rng)
        # The collaborators, bottom up (none of them knows this class); the
        # producer owns their timers.
        self._stats = PublishStats()
        self._pool = Pool(
            addresses, self.connection_config, reconnect, self._connected, self, settings.timeout
        )
        self._discovery: Discovery | None = None
        if lookupd:
            poller = LookupdPoller(
                settings.lookupd_topic,
                lookupd,
                settings.lookupd_request_timeout,
                fallback_to_nodes=True,
            )
            self._discovery = Discovery(
                poller,
                settings.lookupd_poll_interval,
                settings.lookupd_poll_jitter,
                reconnect,
                rng,
                self._pool.discover,
                self,
                self,
            )
        self._router = Router(self._pool, self._stats, settings.timeout, self, self._nothing_known)
        self._deadlines = self._router.deadlines
        self._wheel: TimerWheel | None = None
        self._started = False
        self._closed = False

    def __repr__(self) -> str:
        return f"<Producer {list(self.addresses)} healthy={len(self._pool.healthy)}>"

    @property
    def addresses(self) -> tuple[str, ...]:
        """Every nsqd of the producer now: the static ones, then those lookupd lists."""
        return self._pool.addresses

    def __enter__(self) -> Producer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- lifecycle ---------------------------------------------------------

    def start(self, timeout: float | None = None) -> None:
        """Connect to every nsqd; blocks until each has connected or failed once.

        With lookupd, the first poll comes first: the nsqd it lists are
        connected before this returns. Addresses that fail keep reconnecting
        in the background, and a publish waits (within its timeout) for one to
        come up. ``timeout`` (seconds, default the producer's
        ``config.timeout``) bounds the wait.
        """
        if self._closed:
            raise ConnectionClosedError(",".join(self.addresses), "the producer is closed")
        if self._started:
            return
        self._started = True
        self._wheel = wheel = TimerWheel.for_hub()
        self._deadlines.start(wheel, gevent.get_hub().loop)
        self._router.start(wheel)
        self._pool.start(wheel)
        timeout = self.config.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        if self._discovery is not None:
            self._discovery.start(wheel)
            self._discovery.first_poll.wait(timeout)
        self._pool.wait_connecting(max(0.0, deadline - time.monotonic()))

    def _nothing_known(self) -> NoConnectionsError:
        """The error of a publish given up while the producer knows no nsqd at all."""
        discovery = self._discovery
        if discovery is not None and isinstance(discovery.last_error, NoConnectionsError):
            return NoConnectionsError(
                discovery.last_error.errors, "no nsqd known: every lookupd failed"
            )
        where = ", ".join(self.lookupd_http_addresses) or "nowhere"
        return NoConnectionsError({}, f"no nsqd known: lookupd at {where} lists none yet")

    def _connected(self) -> None:
        self._router.connected()

    def close(self) -> None:
        """Close every connection and stop reconnecting. Safe to call twice.

        Publishes still waiting for an answer fail with
        :class:`~gnsqlite.errors.ConnectionClosedError`.
        """
        if self._closed:
            return
        self._closed = True
        if self._wheel is not None:
            self._wheel.cancel_owner(self)  # every collaborator's timers
        if self._discovery is not None:
            self._discovery.close()  # no poll adds an nsqd from now on
        # The router first: a publish its closing connection fails is not
        # sent again on another one, nor parked with a new timer.
        self._router.close()
        self._pool.close()

    def join(self, timeout: float | None = None) -> bool:
        """Block until every greenlet of the producer has ended; ``True`` if so.

        The producer's greenlets are its connection attempts and lookupd
        polls; each connection's reader and writer end when it closes.
        """
        done = self._discovery is None or self._discovery.join(timeout)
        return self._pool.join(timeout) and done

    @property
    def connections(self) -> Sequence[Connection]:
        """The connections that can publish now."""
        return tuple(cast("list[Connection]", self._pool.healthy))  # Connections, but in tests

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    # -- publishing --------------------------------------------------------

    def publish(
        self,
        topic: str,
        body: Body,
        defer: float | None = None,
        timeout: float | None = None,
    ) -> None:
        """PUB (or DPUB when ``defer`` seconds is given); blocks until nsqd answers.

        ``timeout`` (seconds, default the producer's ``config.timeout``)
        bounds the call, retries on other connections included. Raises the
        server's error (``BadTopicError``, ``BadMessageError`` ...),
        :class:`~gnsqlite.errors.NoConnectionsError` naming each address and
        its error when no nsqd could take the message in time, or
        :class:`~gnsqlite.errors.NSQTimeoutError` when a connection took it
        but nsqd did not answer in time. Invalid names, bodies and sizes
        raise before anything is sent.
        """
        self._deadlines.wait(self._pub(topic, body, defer, timeout, True))

    def multi_publish(
        self, topic: str, bodies: Iterable[Body], timeout: float | None = None
    ) -> None:
        """MPUB ``bodies`` atomically; blocks until nsqd answers. Raises like :meth:`publish`."""
        self._deadlines.wait(self._mpub(topic, bodies, timeout, True))

    def publish_async(
        self,
        topic: str,
        body: Body,
        defer: float | None = None,
        timeout: float | None = None,
    ) -> gevent.event.AsyncResult[bytes]:
        """Like :meth:`publish` but returns an ``AsyncResult`` at once.

        The result resolves to ``b"OK"`` or holds the error. Invalid names,
        bodies and sizes raise here, before anything is queued.
        """
        return self._pub(topic, body, defer, timeout, False).result

    def multi_publish_async(
        self, topic: str, bodies: Iterable[Body], timeout: float | None = None
    ) -> gevent.event.AsyncResult[bytes]:
        """Like :meth:`multi_publish` but returns an ``AsyncResult`` at once."""
        return self._mpub(topic, bodies, timeout, False).result

    def multi_publish_encoded(
        self, topic: str, payload: bytes | memoryview, timeout: float | None = None
    ) -> None:
        """MPUB a ready body; blocks until nsqd answers. Raises like :meth:`publish`.

        ``payload`` is the MPUB body: the 4-byte big-endian message count,
        then per message its 4-byte size and bytes. Only its total size is
        checked here (``max_body_size``); the caller checks each message
        against ``max_message_size``. For columnar sources that should not
        build a ``bytes`` per message (the Spark sink).
        """
        topic = check_topic_name(topic)
        check_body_size(len(payload), self.config)
        count = int.from_bytes(bytes(payload[:4]), "big")  # the body's message count
        data = commands.mpub_encoded(topic, payload)
        self._deadlines.wait(self._router.submit("MPUB", data, topic, count, timeout, True))

    def _pub(
        self,
        topic: str,
        body: Body,
        defer: float | None,
        timeout: float | None,
        blocking: bool,
    ) -> Attempt:
        """Submit the PUB (or DPUB) of ``body``, checked; built once, whatever connection takes it.

        ``blocking``: its caller waits for it next (see :meth:`Router.submit`).
        """
        topic = check_topic_name(topic)
        raw = body if type(body) is bytes else as_body(body)
        if not 0 < len(raw) <= self.config.max_message_size:
            check_message_size(len(raw), self.config)  # raises the error that says why
        if defer is None:
            # Name and body checked above: built without checking them again.
            return self._router.submit("PUB", pub_bytes(topic, raw), topic, 1, timeout, blocking)
        to_milliseconds(defer, "defer")
        data = commands.dpub(topic, defer, raw)
        return self._router.submit("DPUB", data, topic, 1, timeout, blocking)

    def _mpub(
        self, topic: str, bodies: Iterable[Body], timeout: float | None, blocking: bool
    ) -> Attempt:
        """Submit the MPUB of ``bodies``, checked; each body copied once.

        ``blocking``: as :meth:`_pub`.
        """
        topic = check_topic_name(topic)
        if isinstance(bodies, (bytes, str)):
            raise TypeError("multi_publish takes a list of bodies, not one bytes or str")
        # A list of bytes, the usual call, is built as it is: the join checks the
        # types. Anything else (a str, a generator, a limit broken) takes the
        # careful path, which converts every body and says what is wrong.
        raws: Sequence[Any] = bodies if isinstance(bodies, (list, tuple)) else ()
        data = mpub_data(topic, raws, self.config, False) if raws else None
        if data is None:
            raws = [b if type(b) is bytes else as_body(b) for b in bodies]
            data = cast(bytes, mpub_data(topic, raws, self.config, True))  # built, or raised
        return self._router.submit("MPUB", data, topic, len(raws), timeout, blocking)

    # -- counters ----------------------------------------------------------

    def count_publish(
        self,
        topic: str,
        command: str,
        messages: int,
        started: float | None,
        error: BaseException | None,
    ) -> None:
        """Count one publish that ended: answered OK (``error`` ``None``) or failed.

        The producer counts its own; a front end that publishes on one of
        its connections directly (the pynsq ``Writer``) calls this, so that
        :meth:`stats` counts everything. ``started`` is the
        ``time.monotonic()`` of the send (``None``: not timed). Does not block.
        """
        self._stats.count(topic, command, messages, started, error)

    def track_in_flight(self, change: int) -> None:
        """Add ``change`` to the publishes waiting for an answer (for a front end, as above)."""
        self._stats.in_flight += change

    def set_publish_timing(self, timing: PublishTiming | None) -> None:
        """Call ``timing(topic, command, seconds)`` when a publish ends (``None``: stop).

        ``seconds`` runs from the call to nsqd's answer or the failure,
        retries included. It runs in the greenlet that saw the answer (a
        connection's reader): it must not block; its exceptions are logged
        and ignored. :mod:`gnsqlite.metrics` uses it for its histogram.
        """
        self._stats.timing = timing

    def stats(self) -> dict[str, Any]:
        """What the producer published and how its connections are; does not block.

        ``connections``: every address with ``connected`` (it can publish
        now) and ``last_error`` (the text of the last error, or ``None``).
        ``publishes``: one row per topic and command (``"pub"``, ``"mpub"``,
        ``"dpub"``) with ``count`` (commands nsqd answered ``OK``) and
        ``messages`` (the messages in them). ``errors``: failed publishes by
        :func:`error_code`. ``in_flight``: publishes waiting for an answer or
        a connection. Counts are cumulative since the producer was built;
        ``totals`` sums them. ``discovery`` is ``None`` without lookupd, else
        ``lookupd`` (the addresses asked), ``topic`` (``lookupd_topic``),
        ``polls`` (answered), ``failed_polls`` (every lookupd failed),
        ``last_error`` (of the last poll, or ``None``), ``nsqd`` (those listed
        now), ``added`` and ``removed`` (nsqd that joined and left the pool,
        cumulative) and ``draining`` (connections that left, awaiting answers).
        """
        report = self._stats.report(self.addresses, self._pool.healthy, self._pool.last_error)
        report["discovery"] = self._discovery_stats()
        return report

    def _discovery_stats(self) -> dict[str, Any] | None:
        discovery, pool = self._discovery, self._pool
        if discovery is None:
            return None
        error = discovery.last_error
        return {
            "lookupd": list(self.lookupd_http_addresses),
            "topic": self.config.lookupd_topic,
            "polls": discovery.polls,
            "failed_polls": discovery.failed_polls,
            "last_error": None if error is None else str(error),
            "nsqd": list(pool.discovered),
            "added": pool.added,
            "removed": pool.removed,
            "draining": len(pool.draining),
        }

    def health(self) -> Health:
        """Whether the producer can publish now, for a readiness probe; does not block.

        ``ok`` when started, not closed and connected to at least one nsqd.
        Per address: connected or not, and the seconds since anything was read
        from it (heartbeats included). Sends nothing.
        """
        return health_of(
            self.addresses, self._pool.healthy, started=self._started, closed=self._closed
        )
