"""The reader of one client connection: socket -> commands -> their handlers, in order.

:func:`serve` runs in the TCP server's greenlet for the connection: it
starts the session's writer, then reads, decompresses (at most
:data:`DECODE_STEP` bytes at a time, so a deflate bomb costs one step) and
parses commands, and hands each to the session's
:class:`~.client_commands.CommandHandlers`. It stops parsing while more than
:data:`MAX_QUEUED_OUTPUT` bytes wait to be sent (nsqd answers a command
before it reads the next). Errors follow nsqd: the error frame is sent, and
a fatal one closes the connection; anything unexpected is logged and closes
only this connection.
"""

from __future__ import annotations

import logging
import time

import gevent

from ..errors import RemoteProtocolError, ServerError
from ..protocol.server import MpubStart, error_frame
from .client import ClientSession
from .client_commands import CommandHandlers

__all__ = ["DECODE_STEP", "MAX_QUEUED_OUTPUT", "SessionReader", "serve"]

log = logging.getLogger("gnsqlite.broker.client")  # the session's logger

_RECV_SIZE = 256 * 1024
#: Bytes of decompressed input handed to the parser at a time.
DECODE_STEP = 64 * 1024
#: Output (responses, messages) queued for the socket above which the reader
#: waits for the writer before it parses more (nsqd's reader waits for every write).
MAX_QUEUED_OUTPUT = 256 * 1024


def serve(session: ClientSession) -> None:
    """Run ``session`` until the connection ends; blocks (call it in its own greenlet)."""
    SessionReader(session).serve()


class SessionReader:
    """Reads one connection and acts on each command; owns the command handlers."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self.commands = CommandHandlers(session)

    def serve(self) -> None:
        """Start the writer, read until the connection ends, then close it; blocks."""
        session = self.session
        session.output.start()
        try:
            self._read_loop()
        except (OSError, gevent.Timeout) as exc:
            log.debug("%r: connection ended: %s", session, exc)
        except Exception:
            log.exception("%r: unexpected error; closing this connection", session)
        finally:
            session.close(flush=True)

    def _read_loop(self) -> None:
        session = self.session
        output = session.output
        while not session.closed:
            data = output.sock.recv(_RECV_SIZE)
            if not data:
                return
            session.last_received = time.monotonic()
            if not self._consume(data):
                return

    def _consume(self, data: bytes) -> bool:
        """Decode ``data`` in bounded steps, parse and act; ``False`` ends the connection."""
        session = self.session
        output = session.output
        while not session.closed:
            codec = output.codec
            if codec is None:
                plain, data = data, b""
            else:
                try:
                    plain = codec.decode(data, DECODE_STEP)
                except RemoteProtocolError as exc:
                    log.info("%r: undecodable compressed data: %s", session, exc)
                    return False
                data = b""
            session.parser.feed(plain)
            if not self._run_commands():
                return False
            undecoded = self.commands.take_undecoded()
            if undecoded:  # an upgrade just happened: the rest is compressed
                data = undecoded
            elif not (output.codec is not None and output.codec.pending):
                return True
        return False

    def _run_commands(self) -> bool:
        """Act on every complete command parsed; ``False`` ends the connection."""
        session = self.session
        parser = session.parser
        output = session.output
        handlers = self.commands.table
        while not session.closed:
            if output.queued_bytes > MAX_QUEUED_OUTPUT:
                output.wait_drained()
                continue
            try:
                command = parser.next_command()
                if command is None:
                    return True
                handlers[type(command)](command)
                if type(command) is not MpubStart:  # its body is still to come
                    session.last_command = time.monotonic()
            except ServerError as err:
                if err.code == "E_BAD_PROTOCOL":  # as nsqd logs it, one plain line
                    log.warning(
                        "TCP: client(%s) bad protocol magic (an HTTP client given the TCP"
                        " port?); closing",
                        session.remote_address,
                    )
                else:
                    log.info("%r: %s", session, err)
                output.send(error_frame(err))
                if err.fatal:
                    return False
                session.last_command = time.monotonic()
            except RemoteProtocolError as err:
                log.info("%r: %s; closing", session, err)
                return False
        return False
