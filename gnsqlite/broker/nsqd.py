"""The embedded nsqd: :class:`Broker` opens the listeners and runs the timers.

It is the top of the broker: the state it serves (topics, channels, client
sessions, persistence) is :class:`~gnsqlite.broker.state.BrokerState`, which
it extends; it wires the TCP protocol front end (:mod:`.client`) and the HTTP
API (:mod:`.http_api`) to that state.

``Broker(**options)`` opens nothing; :meth:`Broker.start` loads persisted
messages (``data_path``), binds the TCP and HTTP listeners (raising at once
if a port is taken), starts the scan greenlet that drives in-flight
timeouts, deferred messages and heartbeats (like nsqd's ``queueScanLoop``),
serves the HTTP API over TLS too when ``https_address`` is given with
``tls_cert``, and attaches to nsqlookupd when ``lookupd_tcp_addresses`` are given.
:meth:`Broker.stop` closes every client, stops everything it started and
persists.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import gevent
import gevent.pool
import gevent.pywsgi
import gevent.server

from ..net import format_address, parse_address, set_nodelay
from .client import ClientSession
from .client_reader import serve
from .http_api import HttpApi
from .state import NSQD_VERSION, BrokerState, Listener
from .tls import server_context
from .wsgi_log import PlainLogHandler

if TYPE_CHECKING:
    from .lookup_peer import LookupPeers

__all__ = ["Broker", "Listener", "NSQD_VERSION"]

log = logging.getLogger(__name__)


class Broker(BrokerState):
    """An nsqd-compatible broker on gevent; options are nsqd's flags in Python units.

    See :class:`~gnsqlite.broker.options.BrokerOptions` for every option
    (``tcp_address="127.0.0.1:4150"``, ``http_address="127.0.0.1:4151"``,
    port 0 for a free port, ``msg_timeout=60.0`` seconds, ...).
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._tcp_server: gevent.server.StreamServer | None = None
        self._http_server: gevent.pywsgi.WSGIServer | None = None
        self._https_server: gevent.pywsgi.WSGIServer | None = None
        #: the bound HTTPS address and port (``https_address`` with TLS), else "" and 0
        self.https_address = ""
        self.https_port = 0
        self._pools: list[gevent.pool.Pool] = []
        self._scanner: gevent.Greenlet[Any, Any] | None = None
        self._peers: LookupPeers | None = None
        self._started = False

    def __repr__(self) -> str:
        return f"<Broker tcp={self.tcp_address} http={self.http_address}>"

    def __enter__(self) -> Broker:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def is_running(self) -> bool:
        """``True`` between :meth:`start` and :meth:`stop`."""
        return self._started

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Load, bind and serve; returns at once. Raises ``OSError`` if a bind fails."""
        if self._started:
            return
        o = self.options
        if o.tls_cert is not None:
            self.tls_context = server_context(o)
        if o.data_path is not None:
            self._load()
        # the servers spawn connection greenlets into pools this broker kills on stop
        self._pools = [gevent.pool.Pool(), gevent.pool.Pool()]
        tcp = gevent.server.StreamServer(
            parse_address(o.tcp_address), self._handle_connection, spawn=self._pools[0]
        )
        http = self._wsgi_server(o.http_address, None)
        https = None
        if o.https_address is not None and self.tls_context is not None:  # as nsqd: TLS only
            https = self._wsgi_server(o.https_address, self.tls_context)
        servers = [s for s in (tcp, http, https) if s is not None]
        try:
            for server in servers:
                server.start()
        except BaseException:
            for server in servers:
                server.stop()
            raise
        self._tcp_server = tcp
        self._http_server = http
        self._https_server = https
        if https is not None:
            self.https_port = int(https.server_port or 0)
            self.https_address = format_address((str(https.server_host), self.https_port))
        self.tcp_port = int(tcp.server_port or 0)
        self.http_port = int(http.server_port or 0)
        self.tcp_address = format_address((str(tcp.server_host), self.tcp_port))
        self.http_address = format_address((str(http.server_host), self.http_port))
        self.start_time = int(time.time())
        self._started = True
        self._scanner = gevent.spawn(self._scan_loop)
        log.info("TCP: listening on %s; HTTP: listening on %s", self.tcp_address, self.http_address)
        if https is not None:
            log.info("HTTPS: listening on %s", self.https_address)
        if o.lookupd_tcp_addresses:
            from . import lookup_peer  # engineer B's module; imported only when needed

            self._peers = lookup_peer.attach(self, list(o.lookupd_tcp_addresses))
            self._lookup = self._peers  # new topics ask it for their channels

    def stop(self) -> None:
        """Close every client, stop serving, persist to ``data_path``; blocks briefly."""
        if not self._started:
            return
        self._started = False
        if self._peers is not None:
            try:
                self._peers.close()
            except Exception:
                log.exception("closing the lookupd peers failed")
            self._peers = self._lookup = None
        if self._scanner is not None:
            self._scanner.kill()
            self._scanner = None
        if self._tcp_server is not None:
            self._tcp_server.close()
        for client in list(self.clients):
            client.close()
        if self._tcp_server is not None:
            self._tcp_server.stop(timeout=1)
            self._tcp_server = None
        for server in (self._http_server, self._https_server):
            if server is not None:
                server.stop(timeout=1)
        self._http_server = self._https_server = None
        self.https_address, self.https_port = "", 0
        for pool in self._pools:
            pool.kill(timeout=1)
        self._pools = []
        if self.options.data_path is not None:
            try:
                self._save()
            except OSError:
                log.exception("persisting to %s failed", self.options.data_path)

    def _wsgi_server(self, address: str, context: Any) -> gevent.pywsgi.WSGIServer:
        """The HTTP API on ``address``; over TLS when ``context`` is an SSL context."""
        tls: dict[str, Any] = {} if context is None else {"ssl_context": context}
        return gevent.pywsgi.WSGIServer(
            parse_address(address),
            HttpApi(self, None if context else lambda: self.https_port),
            spawn=self._pools[1],
            log=None,
            error_log=logging.getLogger(__name__ + (".https" if context else ".http")),
            handler_class=PlainLogHandler,
            **tls,
        )

    def _handle_connection(self, sock: Any, address: tuple[str, int]) -> None:
        limit = self.options.max_connections
        if limit and len(self.clients) >= limit:
            log.warning(
                "TCP: refusing %s: max_connections=%d connections are open",
                format_address((str(address[0]), int(address[1]))),
                limit,
            )
            sock.close()
            return
        set_nodelay(sock)
        client = ClientSession(self, sock, address)
        self.clients.add(client)
        log.debug("TCP: new client %s", client.remote_address)
        serve(client)

    def _scan_loop(self) -> None:
        interval = self.options.queue_scan_interval
        while True:
            gevent.sleep(interval)
            try:
                self.scan(time.monotonic())
            except Exception:
                log.exception("queue scan failed")
