"""What the embedded broker does with each client command (FIN, RDY, SUB, PUB, IDENTIFY ...).

:class:`CommandHandlers` is held by the session's reader: one method per
command value of :mod:`gnsqlite.protocol.server_commands`, in nsqd v1.3.0's
order of checks and with its error codes and texts, plus the AUTH checks
they share. It acts on the :class:`~.client.ClientSession` it is given (the
connection's record) and writes through the session's output queue. Runs
in the session's reader greenlet.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import gevent

from ..codecs import make_codec
from ..errors import ServerError
from ..protocol.frames import CLOSE_WAIT, OK
from ..protocol.server import (
    STATE_CLOSING,
    STATE_SUBSCRIBED,
    Auth,
    Cls,
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
from .client import ClientSession
from .queues import NotInFlight
from .wire import flush_writes

__all__ = ["CommandHandlers"]

log = logging.getLogger("gnsqlite.broker.client")  # the session's logger, as before the split


class CommandHandlers:
    """The command handlers of one client session; see the module docstring."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self.broker = session.broker
        self._secret = ""
        #: compressed bytes read with the command that asked for compression,
        #: before the codec existed: the reader inflates them next
        self._undecoded = b""
        #: command type -> its handler (the reader's dispatch table)
        self.table: dict[type, Callable[[Any], None]] = {
            Fin: self._fin,
            Rdy: self._rdy,
            Req: self._req,
            Touch: self._touch,
            Pub: self._pub,
            MpubStart: self._mpub_start,
            Mpub: self._mpub,
            Dpub: self._dpub,
            Sub: self._sub,
            Nop: self._nop,
            Cls: self._cls,
            Identify: self._identify,
            Auth: self._auth,
        }

    def take_undecoded(self) -> bytes:
        """The compressed bytes left by an upgrade (``b""`` if none), once."""
        data, self._undecoded = self._undecoded, b""
        return data

    # -- helpers -----------------------------------------------------------

    def _check_auth(self, command: str, topic: str, channel: str) -> None:
        session = self.session
        if not self.broker.options.auth_enabled:
            return
        auth = session.auth
        if auth is None or not auth.authorizations:
            raise client_error("E_AUTH_FIRST", f"AUTH required before {command}")
        now = time.monotonic()
        if auth.expires <= now:
            try:
                auth = session.auth = self._query_auth(now)
            except AuthError as exc:
                log.warning("%r: AUTH refresh failed: %s", session, exc)
                raise client_error("E_AUTH_FAILED", "AUTH failed") from None
        if not auth.is_allowed(topic, channel):
            raise client_error(
                "E_UNAUTHORIZED",
                f"AUTH failed for {command} on {go_quote(topic.encode())}"
                f" {go_quote(channel.encode())}",
            )

    def _query_auth(self, now: float) -> AuthState:
        opts = self.broker.options
        session = self.session
        return query(
            opts.auth_http_addresses,
            opts.auth_policy,
            remote_ip=session.remote_ip,
            tls=session.tls,
            secret=self._secret,
            common_name=session.common_name,
            timeout=opts.http_client_timeout,
            connect_timeout=opts.http_client_connect_timeout,
            now=now,
        )

    def _published(self, topic: str, count: int) -> None:
        counts = self.session.pub_counts
        counts[topic] = counts.get(topic, 0) + count
        self.session.output.send(response_frame(OK))

    def _in_flight_error(
        self, code: str, verb: str, message_id: bytes, exc: Exception
    ) -> ServerError:
        return client_error(code, f"{verb} {message_id.decode('ascii', 'replace')} failed {exc}")

    # -- commands ----------------------------------------------------------

    def _fin(self, command: Fin) -> None:
        session = self.session
        channel = session.channel
        if channel is None:
            raise client_error("E_INVALID", "cannot FIN in current state")
        try:
            channel.finish(session, command.message_id, time.monotonic())
        except NotInFlight as exc:
            raise self._in_flight_error("E_FIN_FAILED", "FIN", command.message_id, exc) from None
        session.pump_woken()

    def _req(self, command: Req) -> None:
        session = self.session
        channel = session.channel
        if channel is None:
            raise client_error("E_INVALID", "cannot REQ in current state")
        try:
            channel.requeue(session, command.message_id, command.delay_ms / 1000, time.monotonic())
        except NotInFlight as exc:
            raise self._in_flight_error("E_REQ_FAILED", "REQ", command.message_id, exc) from None
        session.pump_woken()

    def _touch(self, command: Touch) -> None:
        channel = self.session.channel
        if channel is None:
            raise client_error("E_INVALID", "cannot TOUCH in current state")
        try:
            channel.touch(self.session, command.message_id, time.monotonic())
        except NotInFlight as exc:
            raise self._in_flight_error(
                "E_TOUCH_FAILED", "TOUCH", command.message_id, exc
            ) from None

    def _rdy(self, command: Rdy) -> None:
        session = self.session
        session.ready_count = command.ready_count
        if session.channel is not None:
            session.channel.pump(time.monotonic())
        session.pump_woken()

    def _nop(self, command: Nop) -> None:
        pass

    def _cls(self, command: Cls) -> None:
        session = self.session
        session.closing = True
        session.ready_count = 0
        session.parser.state = STATE_CLOSING
        session.output.send(response_frame(CLOSE_WAIT))

    def _sub(self, command: Sub) -> None:
        self._check_auth("SUB", command.topic, command.channel)
        session = self.session
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
        session.channel = self.broker._subscribe(session, command.topic, command.channel)
        session.parser.state = STATE_SUBSCRIBED
        session.output.send(response_frame(OK))
        session.pump_woken()

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
        session = self.session
        if session.auth is not None and session.auth.authorizations:
            raise client_error("E_INVALID", "AUTH already set")
        if not self.broker.options.auth_enabled:
            raise client_error("E_AUTH_DISABLED", "AUTH disabled")
        self._secret = command.secret.decode("utf-8", "replace")
        try:
            auth = session.auth = self._query_auth(time.monotonic())
        except AuthError as exc:
            log.warning("%r: AUTH failed: %s", session, exc)
            raise client_error("E_AUTH_FAILED", "AUTH failed") from None
        if not auth.authorizations:
            raise client_error("E_UNAUTHORIZED", "AUTH no authorizations found")
        answer = json.dumps(
            {
                "identity": auth.identity,
                "identity_url": auth.identity_url,
                "permission_count": len(auth.authorizations),
            },
            separators=(",", ":"),
        )
        session.output.send(response_frame(answer.encode()))

    def _identify(self, command: Identify) -> None:
        session = self.session
        output = session.output
        neg = negotiate_identify(command.body, self.broker.identify_limits)
        session.client_id = neg.client_id
        session.hostname = neg.hostname
        session.user_agent = neg.user_agent
        session.set_heartbeat_interval(neg.heartbeat_interval_ms / 1000, time.monotonic())
        session.parser.heartbeats_enabled = neg.heartbeat_interval_ms > 0
        session.sample_rate = neg.sample_rate
        session.msg_timeout = neg.msg_timeout_ms / 1000
        output.send(response_frame(neg.response))
        if not (neg.tls or neg.snappy or neg.deflate):
            return
        with output.lock:
            output.flush_locked()
            if neg.tls:
                self._upgrade_tls()
                output.sock.sendall(response_frame(OK))
            if neg.snappy or neg.deflate:
                rest = session.parser.take_unprocessed()
                codec = output.codec = make_codec(
                    "snappy" if neg.snappy else "deflate", neg.deflate_level
                )
                session.snappy = neg.snappy
                session.deflate = neg.deflate
                for data in flush_writes(codec, response_frame(OK)):
                    output.sock.sendall(data)
                self._undecoded = rest  # the reader inflates it in bounded steps
        session.pump_woken()  # nsqd's identify event: the pump wakes, unsubscribed

    def _upgrade_tls(self) -> None:
        session = self.session
        context = self.broker.tls_context
        if context is None:  # negotiate_identify only offers TLS with a context
            raise client_error("E_IDENTIFY_FAILED", "IDENTIFY failed TLS is not configured")
        try:
            with gevent.Timeout(self.broker.options.client_timeout):
                tls_sock = context.wrap_socket(session.output.sock, server_side=True)
        except (OSError, gevent.Timeout) as exc:
            raise client_error("E_IDENTIFY_FAILED", f"IDENTIFY failed {exc}") from None
        session.output.sock = tls_sock
        session.tls = True
        session.parser.tls_pending = False
        session.tls_version = tls_sock.version() or ""
        cipher = tls_sock.cipher()
        session.tls_cipher = cipher[0] if cipher else ""
        cert: Any = tls_sock.getpeercert()
        if cert:
            for rdn in cert.get("subject", ()):
                for key, value in rdn:
                    if key == "commonName":
                        session.common_name = value
