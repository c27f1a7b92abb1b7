"""One client connection of the embedded broker: a V2 protocol session.

:class:`ClientSession` is the connection's record (what IDENTIFY negotiated,
its counts, its channel: what the channel, the scan loop and ``/stats`` see)
and the owner of the objects that do the work:

* :class:`~.client_output.SessionOutput`: the socket, the output queue and
  the writer greenlet (:mod:`.client_output`);
* :class:`~.client_reader.SessionReader`: the reader, which runs in the TCP
  server's greenlet for the connection, parses commands
  (:class:`~gnsqlite.protocol.server.CommandParser`) and hands each to
* :class:`~.client_commands.CommandHandlers`: what the broker does with each
  command (:mod:`.client_commands`). TLS, snappy and deflate upgrades happen
  there, in the reader, holding the output's lock, in nsqd's order
  (response, TLS, ``OK``, compression, ``OK``).

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
  stops parsing while more than :data:`.client_reader.MAX_QUEUED_OUTPUT` bytes
  wait to be sent, and compressed input is inflated
  :data:`.client_reader.DECODE_STEP` bytes at a time
  and parsed in between, so a deflate bomb costs one step, not its ratio.
* before the magic nsqd has **no** deadline at all (``tcp.go`` reads the 4
  bytes with none); this broker closes such a connection after
  ``client_timeout`` like one that sent the magic and nothing else.
"""

from __future__ import annotations

import itertools
import logging
import time
from typing import Any

from ..protocol.frames import HEARTBEAT
from ..protocol.server import CommandParser, error_frame, message_frame, response_frame
from .auth import AuthState
from .client_output import SessionOutput
from .queues import BrokerMessage, Channel
from .state import BrokerState

__all__ = ["ClientSession"]

log = logging.getLogger(__name__)

_ids = itertools.count(1)


class ClientSession:
    """The record of one client connection and the owner of its output (owned by the broker).

    Building one opens nothing and starts no greenlet; the reader
    (:func:`~.client_reader.serve`) starts the output's writer and runs the
    connection.
    """

    def __init__(self, broker: BrokerState, sock: Any, address: tuple[str, int]) -> None:
        opts = broker.options
        self.broker = broker
        self.id = next(_ids)
        self.remote_ip = str(address[0])
        self.remote_address = f"{address[0]}:{address[1]}"
        self.output = SessionOutput(sock, repr(self), self.close)
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
        self.msg_timeout = opts.msg_timeout
        self.sample_rate = 0
        self.tls = False
        self.snappy = False
        self.deflate = False
        self.tls_version = ""
        self.tls_cipher = ""
        self.common_name = ""
        self.auth: AuthState | None = None
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
        self.heartbeat_interval = 0.0
        self.next_heartbeat = now
        self.set_heartbeat_interval(opts.client_timeout / 2, now)
        self.closed = False

    def __repr__(self) -> str:
        return f"<ClientSession {self.id} {self.remote_address}>"

    @property
    def state(self) -> int:
        """nsqd's client state number (0 init, 3 subscribed, 4 closing)."""
        return self.parser.state

    def set_heartbeat_interval(self, seconds: float, now: float) -> None:
        """Heartbeats every ``seconds`` (0: none) from ``now``; a write may take as long."""
        self.heartbeat_interval = seconds
        self.next_heartbeat = now + seconds
        self.output.write_timeout = seconds

    def close(self, flush: bool = False) -> None:
        """Close the socket and leave the channel; never raises.

        With ``flush`` (the connection's own reader, after a fatal error) what
        is queued is sent first, waiting at most one second; other callers
        (the scan loop, HTTP handlers, ``stop()``) must not block on a client.
        """
        if self.closed:
            return
        self.closed = True
        self.broker._client_closed(self)
        self.output.close(flush)

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
                self.output.send(error_frame(error))
                self.output.close_after_flush()
            return
        if now >= self.next_heartbeat:
            self.next_heartbeat = now + interval
            self.output.send(response_frame(HEARTBEAT))
            self.pump_woken()

    def send_message(self, message: BrokerMessage) -> None:
        """Queue a message frame (called by the channel; never blocks)."""
        self.output.send_message(
            message_frame(message.id, message.body, message.timestamp, message.attempts)
        )

    def pump_woken(self) -> None:
        """Mark where nsqd's message pump wakes: unable to take messages, it flushes.

        Only deflate shows it on the wire (an empty sync block, see
        :mod:`.wire`); the other streams write nothing for an empty flush.
        """
        if self.deflate and not self._ready_for_messages():
            self.output.mark_flush()

    def _ready_for_messages(self) -> bool:
        channel = self.channel
        if channel is None or channel.paused:
            return False
        return self.ready_count > 0 and self.in_flight_count < self.ready_count
