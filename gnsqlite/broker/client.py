"""One client connection of the embedded broker: a V2 protocol session.

:meth:`ClientSession.serve` runs in the TCP server's greenlet for the
connection: it reads, decompresses and parses commands
(:class:`~gnsqlite.protocol.server.CommandParser`) and acts on each, in order.
What the broker sends (responses, errors, messages, heartbeats) is appended
to an output list; the session's **writer** greenlet sends everything queued
since it last ran in one ``sendall``, so a burst of deliveries shares a
syscall. That is the spirit of nsqd's ``output_buffer_size``/``_timeout``
(batch writes) without its added latency: the buffer is flushed as soon as
the greenlet that filled it yields. TLS, snappy and deflate upgrades happen inside the reader while
holding the write lock, in nsqd's order (response, TLS, ``OK``, compression,
``OK``).

Errors follow nsqd: the error frame is sent, and a fatal one closes the
connection. Anything unexpected is logged and closes only this connection.

Limits, as nsqd v1.3.0 has them (``nsqd/protocol_v2.go``):

* **read deadline per command**: nsqd's ``IOLoop`` sets a read deadline of two
  heartbeat intervals before reading each command line, and the line and its
  body must arrive before it. A client idle that long, or one trickling a
  command in byte by byte (slow loris), is closed without a word
  (:meth:`ClientSession.tick`). Bytes arriving do not extend the deadline;
  only a completed command does.
* **write deadline**: nsqd's ``Send`` gives every write one heartbeat
  interval; a client that does not read is closed when a write stalls that
  long (no deadline when heartbeats are disabled, like nsqd).
* **bounded output**: nsqd answers a command before it reads the next, so a
  client that sends without reading stalls its own reader. Here the reader
  stops parsing while more than :data:`MAX_QUEUED_OUTPUT` bytes wait to be
  sent, and compressed input is inflated :data:`DECODE_STEP` bytes at a time
  and parsed in between, so a deflate bomb costs one step, not its ratio.
* before the magic nsqd has **no** deadline at all (``tcp.go`` reads the 4
  bytes with none); this broker closes such a connection after
  ``client_timeout`` like one that sent the magic and nothing else.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import gevent
import gevent.event
import gevent.lock

from ..codecs import Codec, make_codec
from ..errors import RemoteProtocolError, ServerError
from ..protocol.frames import CLOSE_WAIT, HEARTBEAT, OK
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
    error_frame,
    go_quote,
    message_frame,
    negotiate_identify,
    response_frame,
)
from .auth import AuthError, AuthState, query
from .queues import BrokerMessage, Channel, NotInFlight
from .state import BrokerState
from .wire import empty_flush_writes, flush_writes

__all__ = ["ClientSession"]

log = logging.getLogger(__name__)

_RECV_SIZE = 256 * 1024
#: Bytes of decompressed input handed to the parser at a time.
DECODE_STEP = 64 * 1024
#: Output (responses, messages) queued for the socket above which the reader
#: waits for the writer before it parses more (nsqd's reader waits for every write).
MAX_QUEUED_OUTPUT = 256 * 1024
#: A mark in the output queue of a compressed connection, compared by identity
#: (no frame is this object): nsqd flushes here, after every frame but a
#: message and whenever its message pump wakes unable to send messages.
_FLUSH = b"<flush>"
_ids = itertools.count(1)


class ClientSession:
    """The state and greenlets of one client connection (owned by the broker)."""

    def __init__(self, broker: BrokerState, sock: Any, address: tuple[str, int]) -> None:
        opts = broker.options
        self.broker = broker
        self.sock = sock
        self.id = next(_ids)
        self.remote_ip = str(address[0])
        self.remote_address = f"{address[0]}:{address[1]}"
        self.parser = CommandParser(
            max_msg_size=opts.max_msg_size,
            max_body_size=opts.max_body_size,
            max_rdy_count=opts.max_rdy_count,
            max_req_timeout_ms=round(opts.max_req_timeout * 1000),
        )
        self.parser.tls_pending = bool(opts.tls_required)  # True or "tcp-https"
        # like nsqd's newClientV2: the remote IP until IDENTIFY replaces both
        self.client_id = self.remote_ip
        self.hostname = self.remote_ip
        self.user_agent = ""
        self.heartbeat_interval = opts.client_timeout / 2
        self.msg_timeout = opts.msg_timeout
        self.sample_rate = 0
        self.tls = False
        self.snappy = False
        self.deflate = False
        self.tls_version = ""
        self.tls_cipher = ""
        self.common_name = ""
        self.auth: AuthState | None = None
        self._secret = ""
        self.ready_count = 0
        self.in_flight_count = 0
        self.message_count = 0
        self.finish_count = 0
        self.requeue_count = 0
        self.closing = False
        self.channel: Channel | None = None
        self.pub_counts: dict[str, int] = {}
        self.connect_ts = int(time.time())
        now = time.monotonic()
        self.last_received = now
        #: when the last command completed (or the connection opened): the
        #: next one must be complete two heartbeat intervals later
        self.last_command = now
        self.next_heartbeat = now + self.heartbeat_interval
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._drained = gevent.event.Event()
        self._undecoded = b""  # compressed bytes read before the codec existed
        self._close_after_flush = False  # the writer closes once it sent what is queued
        self._wake = gevent.event.Event()
        self._write_lock = gevent.lock.Semaphore()
        self._codec: Codec | None = None
        self._writer: gevent.Greenlet[Any, Any] | None = None
        self.closed = False
        self._handlers: dict[type, Callable[[Any], None]] = {
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

    def __repr__(self) -> str:
        return f"<ClientSession {self.id} {self.remote_address}>"

    @property
    def state(self) -> int:
        """nsqd's client state number (0 init, 3 subscribed, 4 closing)."""
        return self.parser.state

    # -- lifecycle ---------------------------------------------------------

    def serve(self) -> None:
        """Run the connection until it ends; blocks (call it in its own greenlet)."""
        self._writer = gevent.spawn(self._write_loop)
        try:
            self._read_loop()
        except (OSError, gevent.Timeout) as exc:
            log.debug("%r: connection ended: %s", self, exc)
        except Exception:
            log.exception("%r: unexpected error; closing this connection", self)
        finally:
            self.close(flush=True)

    def close(self, flush: bool = False) -> None:
        """Close the socket and leave the channel; never raises.

        With ``flush`` (the connection's own reader, after a fatal error) what
        is queued is sent first, waiting at most one second; other callers
        (the scan loop, HTTP handlers, ``stop()``) must not block on a client.
        """
        if self.closed:
            return
        self.closed = True
        self._drained.set()  # a reader waiting for the writer must see the end
        self.broker._client_closed(self)
        writer = self._writer
        if writer is not None and writer is not gevent.getcurrent():
            writer.kill(block=False)
        if flush:
            try:
                with gevent.Timeout(1.0), self._write_lock:
                    self._flush_locked()
            except (Exception, gevent.Timeout) as exc:
                log.debug("%r: final flush failed: %s", self, exc)
        with contextlib.suppress(OSError):
            self.sock.close()
        self._wake.set()

    def tick(self, now: float) -> None:
        """Send a due heartbeat; close a client with no whole command for two intervals.

        That is nsqd's read deadline (two heartbeat intervals per command):
        it closes an idle client and a slow-loris one alike.
        """
        interval = self.heartbeat_interval
        if interval <= 0 or self.closed:
            return
        if now - self.last_command > 2 * interval:
            log.info(
                "%r: no complete command for %.1f s (2 heartbeats); closing",
                self,
                now - self.last_command,
            )
            error = self.parser.read_deadline_error()
            if error is None:
                self.close()
            else:  # inside a body nsqd answers the failed read, then closes
                self._send(error_frame(error))
                self._close_after_flush = True
            return
        if now >= self.next_heartbeat:
            self.next_heartbeat = now + interval
            self._send(response_frame(HEARTBEAT))
            self._pump_woken()

    # -- reading -----------------------------------------------------------

    def _read_loop(self) -> None:
        while not self.closed:
            data = self.sock.recv(_RECV_SIZE)
            if not data:
                return
            self.last_received = time.monotonic()
            if not self._consume(data):
                return

    def _consume(self, data: bytes) -> bool:
        """Decode ``data`` in bounded steps, parse and act; ``False`` ends the connection."""
        while not self.closed:
            codec = self._codec
            if codec is None:
                plain, data = data, b""
            else:
                try:
                    plain = codec.decode(data, DECODE_STEP)
                except RemoteProtocolError as exc:
                    log.info("%r: undecodable compressed data: %s", self, exc)
                    return False
                data = b""
            self.parser.feed(plain)
            if not self._run_commands():
                return False
            if self._undecoded:  # an upgrade just happened: the rest is compressed
                data, self._undecoded = self._undecoded, b""
            elif not (self._codec is not None and self._codec.pending):
                return True
        return False

    def _run_commands(self) -> bool:
        """Act on every complete command parsed; ``False`` ends the connection."""
        parser = self.parser
        handlers = self._handlers
        while not self.closed:
            if self._out_bytes > MAX_QUEUED_OUTPUT:
                self._wait_drained()
                continue
            try:
                command = parser.next_command()
                if command is None:
                    return True
                handlers[type(command)](command)
                if type(command) is not MpubStart:  # its body is still to come
                    self.last_command = time.monotonic()
            except ServerError as err:
                log.info("%r: %s", self, err)
                self._send(error_frame(err))
                if err.fatal:
                    return False
                self.last_command = time.monotonic()
            except RemoteProtocolError as err:
                log.info("%r: %s; closing", self, err)
                return False
        return False

    def _wait_drained(self) -> None:
        """Block the reader until the writer sent what is queued (or the connection ends)."""
        self._drained.clear()
        self._wake.set()
        self._drained.wait()

    # -- writing -----------------------------------------------------------

    def _send(self, frame: bytes) -> None:
        """Queue a response or error frame (nsqd flushes after each of them)."""
        self._out.append(frame)
        self._out_bytes += len(frame)
        if self._codec is not None:
            self._out.append(_FLUSH)
        self._wake.set()

    def send_message(self, message: BrokerMessage) -> None:
        """Queue a message frame (called by the channel; never blocks)."""
        frame = message_frame(message.id, message.body, message.timestamp, message.attempts)
        self._out.append(frame)
        self._out_bytes += len(frame)
        self._wake.set()

    def _pump_woken(self) -> None:
        """Mark where nsqd's message pump wakes: unable to take messages, it flushes.

        Only deflate shows it on the wire (an empty sync block, see
        :mod:`.wire`); the other streams write nothing for an empty flush.
        """
        if self.deflate and not self._ready_for_messages():
            self._out.append(_FLUSH)
            self._wake.set()

    def _ready_for_messages(self) -> bool:
        channel = self.channel
        if channel is None or channel.paused:
            return False
        return self.ready_count > 0 and self.in_flight_count < self.ready_count

    def _write_loop(self) -> None:
        try:
            while not self.closed:
                self._wake.wait()
                self._wake.clear()
                if self._out:
                    # nsqd's write deadline: one heartbeat interval per write
                    deadline = self.heartbeat_interval
                    with gevent.Timeout(deadline if deadline > 0 else None), self._write_lock:
                        self._flush_locked()
                self._drained.set()
                if self._close_after_flush:
                    self.close()
        except gevent.Timeout:
            log.info(
                "%r: a write stalled for %.1f s (the heartbeat interval): the client"
                " does not read; closing",
                self,
                self.heartbeat_interval,
            )
            self.close()
        except OSError as exc:
            log.debug("%r: send failed: %s", self, exc)
            self.close()

    def _flush_locked(self) -> None:
        out = self._out
        if not out:
            return
        self._out_bytes = 0
        codec = self._codec
        if codec is None:
            data = b"".join(out)
            out.clear()
            self.sock.sendall(data)
            return
        # a compressed stream leaves in the write calls nsqd makes (see .wire)
        writes: list[bytes] = []
        pending: list[bytes] = []
        for item in out:
            if item is not _FLUSH:
                pending.append(item)
            elif pending:
                writes += flush_writes(codec, b"".join(pending))
                pending.clear()
            else:
                writes += empty_flush_writes(codec)
        out.clear()
        if pending:
            writes += flush_writes(codec, b"".join(pending))
        for data in writes:
            self.sock.sendall(data)

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
            channel.finish(self, command.message_id, time.monotonic())
        except NotInFlight as exc:
            raise self._in_flight_error("E_FIN_FAILED", "FIN", command.message_id, exc) from None
        self._pump_woken()

    def _req(self, command: Req) -> None:
        channel = self.channel
        if channel is None:
            raise client_error("E_INVALID", "cannot REQ in current state")
        try:
            channel.requeue(self, command.message_id, command.delay_ms / 1000, time.monotonic())
        except NotInFlight as exc:
            raise self._in_flight_error("E_REQ_FAILED", "REQ", command.message_id, exc) from None
        self._pump_woken()

    def _touch(self, command: Touch) -> None:
        channel = self.channel
        if channel is None:
            raise client_error("E_INVALID", "cannot TOUCH in current state")
        try:
            channel.touch(self, command.message_id, time.monotonic())
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
        channel = self.broker._subscribe(self, command.topic, command.channel)
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
