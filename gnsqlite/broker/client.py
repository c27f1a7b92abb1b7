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
import logging
import time
from collections.abc import Callable
from typing import Any

import gevent
import gevent.event
import gevent.lock

from ..codecs import Codec
from ..errors import RemoteProtocolError, ServerError
from ..protocol.frames import HEARTBEAT
from ..protocol.server import (
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
    error_frame,
    message_frame,
    response_frame,
)
from .auth import AuthState
from .client_commands import CommandHandlers
from .queues import BrokerMessage, Channel
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


class ClientSession(CommandHandlers):
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
                if err.code == "E_BAD_PROTOCOL":  # as nsqd logs it, one plain line
                    log.warning(
                        "TCP: client(%s) bad protocol magic (an HTTP client given the TCP"
                        " port?); closing",
                        self.remote_address,
                    )
                else:
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
