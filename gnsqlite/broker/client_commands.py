"""What the embedded broker does with each client command (FIN, RDY, SUB, PUB, IDENTIFY ...).

A mixin of :class:`~gnsqlite.broker.client.ClientSession`: one method per
command value of :mod:`gnsqlite.protocol.server_commands`, in nsqd v1.3.0's
order of checks and with its error codes and texts, plus the AUTH checks
they share. Runs in the session's reader greenlet; the writes go through
the session's output queue.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

import gevent.lock

from ..codecs import Codec, make_codec
from ..errors import ServerError
from ..protocol.frames import CLOSE_WAIT, OK
from ..protocol.server import (
    STATE_CLOSING,
    STATE_SUBSCRIBED,
    Auth,
    Cls,
    CommandParser,
    Dpub,
    Fin,
    Identify,
    Mpub,
    MpubStart,
    Nop,
    Pub,
    Rdy,
    Req,
    Sub,
    Touch,
    client_error,
    go_quote,
    negotiate_identify,
    response_frame,
)
from .auth import AuthError, AuthState, query
from .queues import Channel, NotInFlight
from .state import BrokerState
from .wire import flush_writes

__all__ = ["CommandHandlers"]

log = logging.getLogger("gnsqlite.broker.client")  # the session's logger, as before the split


class CommandHandlers:
    """The command handlers of a client session; see the module docstring."""

    broker: BrokerState
    sock: Any
    parser: CommandParser
    remote_ip: str
    client_id: str
    hostname: str
    user_agent: str
    heartbeat_interval: float
    msg_timeout: float
    sample_rate: int
    tls: bool
    snappy: bool
    deflate: bool
    tls_version: str
    tls_cipher: str
    common_name: str
    auth: AuthState | None
    ready_count: int
    closing: bool
    channel: Channel | None
    pub_counts: dict[str, int]
    next_heartbeat: float
    _secret: str
    _codec: Codec | None
    _undecoded: bytes
    _write_lock: gevent.lock.Semaphore

    if TYPE_CHECKING:

        def _send(self, frame: bytes) -> None: ...
        def _flush_locked(self) -> None: ...
        def _pump_woken(self) -> None: ...

    # -- helpers -----------------------------------------------------------

    def _check_auth(self, command: str, topic: str, channel: str) -> None:
        broker = self.broker
        if not broker.options.auth_enabled:
            return
        if self.auth is None or not self.auth.authorizations:
            raise client_error("E_AUTH_FIRST", f"AUTH required before {command}")
        now = time.monotonic()
        if self.auth.expires <= now:
            try:
                self.auth = self._query_auth(now)
            except AuthError as exc:
                log.warning("%r: AUTH refresh failed: %s", self, exc)
                raise client_error("E_AUTH_FAILED", "AUTH failed") from None
        if not self.auth.is_allowed(topic, channel):
            raise client_error(
                "E_UNAUTHORIZED",
                f"AUTH failed for {command} on {go_quote(topic.encode())}"
                f" {go_quote(channel.encode())}",
            )

    def _query_auth(self, now: float) -> AuthState:
        opts = self.broker.options
        return query(
            opts.auth_http_addresses,
            opts.auth_policy,
            remote_ip=self.remote_ip,
            tls=self.tls,
            secret=self._secret,
            common_name=self.common_name,
            timeout=opts.http_client_timeout,
            connect_timeout=opts.http_client_connect_timeout,
            now=now,
        )

    def _published(self, topic: str, count: int) -> None:
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + count
        self._send(response_frame(OK))

    def _in_flight_error(
        self, code: str, verb: str, message_id: bytes, exc: Exception
    ) -> ServerError:
        return client_error(code, f"{verb} {message_id.decode('ascii', 'replace')} failed {exc}")

    # -- commands ----------------------------------------------------------

    def _fin(self, command: Fin) -> None:
        channel = self.channel
        if channel is None:
            raise client_error("E_INVALID", "cannot FIN in current state")
        try:
            channel.finish(self, command.message_id, time.monotonic())  # type: ignore[arg-type]  # a ClientSession
        except NotInFlight as exc:
            raise self._in_flight_error("E_FIN_FAILED", "FIN", command.message_id, exc) from None
        self._pump_woken()

    def _req(self, command: Req) -> None:
        channel = self.channel
        if channel is None:
            raise client_error("E_INVALID", "cannot REQ in current state")
        try:
            channel.requeue(self, command.message_id, command.delay_ms / 1000, time.monotonic())  # type: ignore[arg-type]  # a ClientSession
        except NotInFlight as exc:
            raise self._in_flight_error("E_REQ_FAILED", "REQ", command.message_id, exc) from None
        self._pump_woken()

    def _touch(self, command: Touch) -> None:
        channel = self.channel
        if channel is None:
            raise client_error("E_INVALID", "cannot TOUCH in current state")
        try:
            channel.touch(self, command.message_id, time.monotonic())  # type: ignore[arg-type]  # a ClientSession
        except NotInFlight as exc:
            raise self._in_flight_error(
                "E_TOUCH_FAILED", "TOUCH", command.message_id, exc
            ) from None

    def _rdy(self, command: Rdy) -> None:
        self.ready_count = command.ready_count
        if self.channel is not None:
            self.channel.pump(time.monotonic())
        self._pump_woken()

    def _nop(self, command: Nop) -> None:
        pass

    def _cls(self, command: Cls) -> None:
        self.closing = True
        self.ready_count = 0
        self.parser.state = STATE_CLOSING
        self._send(response_frame(CLOSE_WAIT))

    def _sub(self, command: Sub) -> None:
        self._check_auth("SUB", command.topic, command.channel)
        limit = self.broker.options.max_channel_consumers
        if limit:
            # like nsqd: the channel is created, then the client refused (fatal)
            found = self.broker.get_topic(command.topic).get_channel(
                command.channel, time.monotonic()
            )
            if len(found.subscribers) >= limit:
                raise client_error(
                    "E_SUB_FAILED",
                    f"SUB failed consumers for {command.topic}:{command.channel}"
                    f" exceeds limit of {limit}",
                )
        channel = self.broker._subscribe(self, command.topic, command.channel)  # type: ignore[arg-type]  # a ClientSession
        self.channel = channel
        self.parser.state = STATE_SUBSCRIBED
        self._send(response_frame(OK))
        self._pump_woken()

    def _pub(self, command: Pub) -> None:
        self._check_auth("PUB", command.topic, "")
        self.broker.publish(command.topic, [command.body])
        self._published(command.topic, 1)

    def _mpub_start(self, command: MpubStart) -> None:
        self._check_auth("MPUB", command.topic, "")
        self.broker.get_topic(command.topic)

    def _mpub(self, command: Mpub) -> None:
        self.broker.publish(command.topic, command.bodies)
        self._published(command.topic, len(command.bodies))

    def _dpub(self, command: Dpub) -> None:
        self._check_auth("DPUB", command.topic, "")
        self.broker.publish(command.topic, [command.body], delay=command.delay_ms / 1000)
        self._published(command.topic, 1)

    def _auth(self, command: Auth) -> None:
        if self.auth is not None and self.auth.authorizations:
            raise client_error("E_INVALID", "AUTH already set")
        if not self.broker.options.auth_enabled:
            raise client_error("E_AUTH_DISABLED", "AUTH disabled")
        self._secret = command.secret.decode("utf-8", "replace")
        try:
            self.auth = self._query_auth(time.monotonic())
        except AuthError as exc:
            log.warning("%r: AUTH failed: %s", self, exc)
            raise client_error("E_AUTH_FAILED", "AUTH failed") from None
        if not self.auth.authorizations:
            raise client_error("E_UNAUTHORIZED", "AUTH no authorizations found")
        answer = json.dumps(
            {
                "identity": self.auth.identity,
                "identity_url": self.auth.identity_url,
                "permission_count": len(self.auth.authorizations),
            },
            separators=(",", ":"),
        )
        self._send(response_frame(answer.encode()))

    def _identify(self, command: Identify) -> None:
        neg = negotiate_identify(command.body, self.broker.identify_limits)
        self.client_id = neg.client_id
        self.hostname = neg.hostname
        self.user_agent = neg.user_agent
        self.heartbeat_interval = neg.heartbeat_interval_ms / 1000
        self.parser.heartbeats_enabled = neg.heartbeat_interval_ms > 0
        self.next_heartbeat = time.monotonic() + self.heartbeat_interval
        self.sample_rate = neg.sample_rate
        self.msg_timeout = neg.msg_timeout_ms / 1000
        self._send(response_frame(neg.response))
        if not (neg.tls or neg.snappy or neg.deflate):
            return
        with self._write_lock:
            self._flush_locked()
            if neg.tls:
                self._upgrade_tls()
                self.sock.sendall(response_frame(OK))
            if neg.snappy or neg.deflate:
                rest = self.parser.take_unprocessed()
                self._codec = make_codec("snappy" if neg.snappy else "deflate", neg.deflate_level)
                self.snappy = neg.snappy
                self.deflate = neg.deflate
                for data in flush_writes(self._codec, response_frame(OK)):
                    self.sock.sendall(data)
                self._undecoded = rest  # _consume inflates it in bounded steps
        self._pump_woken()  # nsqd's identify event: the pump wakes, unsubscribed

    def _upgrade_tls(self) -> None:
        context = self.broker.tls_context
        if context is None:  # negotiate_identify only offers TLS with a context
            raise client_error("E_IDENTIFY_FAILED", "IDENTIFY failed TLS is not configured")
        try:
            with gevent.Timeout(self.broker.options.client_timeout):
                tls_sock = context.wrap_socket(self.sock, server_side=True)
        except (OSError, gevent.Timeout) as exc:
            raise client_error("E_IDENTIFY_FAILED", f"IDENTIFY failed {exc}") from None
        self.sock = tls_sock
        self.tls = True
        self.parser.tls_pending = False
        self.tls_version = tls_sock.version() or ""
        cipher = tls_sock.cipher()
        self.tls_cipher = cipher[0] if cipher else ""
        cert: Any = tls_sock.getpeercert()
        if cert:
            for rdn in cert.get("subject", ()):
                for key, value in rdn:
                    if key == "commonName":
                        self.common_name = value
