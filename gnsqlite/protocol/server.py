"""The server side of the NSQ TCP protocol V2 as pure code: bytes in, commands out.

:class:`CommandParser` is what nsqd's ``IOLoop`` does with the byte stream: it
checks the magic, splits command lines, reads the size-prefixed bodies of
``IDENTIFY``, ``AUTH``, ``PUB``, ``MPUB`` and ``DPUB`` and validates everything
nsqd validates before acting, in nsqd's order and with nsqd's error codes and
texts. A body size is checked against its limit *before* the body is
buffered, so a hostile size prefix costs nothing. Errors are raised as
:class:`~gnsqlite.errors.ServerError` subclasses whose ``fatal`` flag says
whether nsqd closes the connection after sending them.

The parser knows the connection state only through the attributes its owner
sets (:attr:`CommandParser.state`, :attr:`CommandParser.tls_pending`,
:attr:`CommandParser.heartbeats_enabled`): state checks happen here, actions
(subscribing, publishing) happen in the broker.

:func:`negotiate_identify` turns an ``IDENTIFY`` body into the client's
settings and nsqd's answer; :func:`split_mpub` splits an HTTP ``MPUB`` body;
:func:`message_frame`, :func:`response_frame` and :func:`error_frame` build
what a server sends. The command values are in
:mod:`~gnsqlite.protocol.server_commands`, the frames in
:mod:`~gnsqlite.protocol.server_frames`, IDENTIFY in
:mod:`~gnsqlite.protocol.negotiate`; all are importable from here too.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

from ..errors import RemoteProtocolError, ServerError
from . import defaults
from .commands import MAGIC_V2, MESSAGE_ID_LENGTH
from .names import valid_channel_name, valid_topic_name
from .negotiate import IdentifyLimits, Negotiated, negotiate_identify
from .server_commands import (
    STATE_CLOSING,
    STATE_INIT,
    STATE_SUBSCRIBED,
    Auth,
    Cls,
    Command,
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
)
from .server_frames import client_error, error_frame, go_quote, message_frame, response_frame

__all__ = [
    "STATE_INIT",
    "STATE_SUBSCRIBED",
    "STATE_CLOSING",
    "MAX_LINE_LENGTH",
    "Identify",
    "Auth",
    "Sub",
    "Pub",
    "MpubStart",
    "Mpub",
    "Dpub",
    "Rdy",
    "Fin",
    "Req",
    "Touch",
    "Cls",
    "Nop",
    "Command",
    "CommandParser",
    "IdentifyLimits",
    "Negotiated",
    "negotiate_identify",
    "split_mpub",
    "client_error",
    "error_frame",
    "response_frame",
    "message_frame",
    "go_quote",
]

#: nsqd reads commands through a 16 KiB buffer; a longer line ends the connection.
MAX_LINE_LENGTH = 16 * 1024

_SIZE = struct.Struct(">i")


_NOP = Nop()
_CLS = Cls()


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _base10(raw: bytes) -> int | None:
    """nsqd's ``ByteToBase10``: digits only (empty is 0), else ``None``."""
    if raw and not raw.isdigit():
        return None
    return int(raw) if raw else 0


def _invalid(text: str) -> ServerError:
    return client_error("E_INVALID", text)


def _message_id(raw: bytes) -> bytes:
    if len(raw) != MESSAGE_ID_LENGTH:
        raise _invalid("invalid message ID")  # nsqd v1.3.0's text, lower case
    return raw


class _Body(NamedTuple):
    """A command line read; its body is still to come."""

    name: str
    topic: str
    delay_ms: int


class CommandParser:
    """Turn a client's byte stream into commands, enforcing nsqd's rules.

    Limits are in bytes (``max_msg_size``, ``max_body_size``, RDY count) and
    milliseconds (``max_req_timeout_ms``). :meth:`feed` buffers bytes;
    :meth:`next_command` returns one command, ``None`` when more bytes are
    needed, or raises a :class:`~gnsqlite.errors.ServerError` (send it, then
    close if ``.fatal``) or :class:`~gnsqlite.errors.RemoteProtocolError`
    (close without a word, as nsqd does for an over-long line). A wrong magic
    raises the fatal ``E_BAD_PROTOCOL``.

    Commands are returned one at a time because the owner's reaction (a
    ``SUB`` changes :attr:`state`) decides how the next one is checked.
    """

    def __init__(
        self,
        *,
        max_msg_size: int = defaults.MAX_MSG_SIZE,
        max_body_size: int = defaults.MAX_BODY_SIZE,
        max_rdy_count: int = defaults.MAX_RDY_COUNT,
        max_req_timeout_ms: int = round(defaults.MAX_REQ_TIMEOUT * 1000),
    ) -> None:
        self.max_msg_size = max_msg_size
        self.max_body_size = max_body_size
        self.max_rdy_count = max_rdy_count
        self.max_req_timeout_ms = max_req_timeout_ms
        #: One of :data:`STATE_INIT`, :data:`STATE_SUBSCRIBED`, :data:`STATE_CLOSING`.
        self.state = STATE_INIT
        #: ``True`` while TLS is required and not yet negotiated.
        self.tls_pending = False
        #: ``False`` once IDENTIFY disabled heartbeats (SUB is then refused).
        self.heartbeats_enabled = True
        self._buf = bytearray()
        self._pos = 0
        self._magic = False
        self._pending: _Body | None = None
        self._body_size = -1
        self._mpub_count = -1  # MPUB: messages announced, -1 until read
        self._mpub_size = -1  # MPUB: size of the message being read, -1 until read
        self._mpub_bodies: list[bytes] = []
        self._lines: dict[bytes, Callable[[list[bytes]], Command | _Body]] = {
            b"FIN": self._fin,
            b"RDY": self._rdy,
            b"REQ": self._req,
            b"PUB": self._pub,
            b"MPUB": self._mpub,
            b"DPUB": self._dpub,
            b"NOP": self._nop,
            b"TOUCH": self._touch,
            b"SUB": self._sub,
            b"CLS": self._cls,
            b"AUTH": self._auth,
        }

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received (already decompressed) bytes."""
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def take_unprocessed(self) -> bytes:
        """Remove and return the bytes not parsed yet (at a TLS or compression upgrade)."""
        rest = bytes(self._buf[self._pos :])
        self._buf = bytearray()
        self._pos = 0
        return rest

    def next_command(self) -> Command | None:
        """Parse and return the next command, or ``None`` if more bytes are needed."""
        if not self._magic:
            if len(self._buf) - self._pos < 4:
                return None
            magic = bytes(self._buf[self._pos : self._pos + 4])
            self._pos += 4
            if magic != MAGIC_V2:
                raise ServerError("", code="E_BAD_PROTOCOL")
            self._magic = True
        if self._pending is not None:
            return self._read_body()
        buf = self._buf
        pos = self._pos
        end = buf.find(b"\n", pos)
        if end < 0:
            if len(buf) - pos > MAX_LINE_LENGTH:
                raise RemoteProtocolError(f"a command line longer than {MAX_LINE_LENGTH} bytes")
            return None
        line = bytes(buf[pos:end])
        self._pos = end + 1
        if line[-1:] == b"\r":
            line = line[:-1]
        params = line.split(b" ")
        name = params[0]
        if name == b"IDENTIFY":
            if self.state != STATE_INIT:
                raise _invalid("cannot IDENTIFY in current state")
            self._pending = _Body("IDENTIFY", "", 0)
            return self._read_body()
        if self.tls_pending:
            raise _invalid(f"cannot {_text(name)} in current state (TLS required)")
        handler = self._lines.get(name)
        if handler is None:
            raise _invalid(f"invalid command {_text(name)}")
        result = handler(params)
        if isinstance(result, _Body):
            self._pending = result
            if result.name == "MPUB":
                return MpubStart(result.topic)
            return self._read_body()
        return result

    def read_deadline_error(self) -> ServerError | None:
        """The error nsqd sends when its read deadline passes now, or ``None``.

        Waiting for a command line nsqd closes without a word; inside a body
        its read fails and it sends the fatal "failed to read" error of that
        command (``protocol_v2.go``), then closes.
        """
        pending = self._pending
        if pending is None:
            return None
        name = pending.name
        if name == "MPUB":
            if self._body_size < 0:
                return client_error("E_BAD_BODY", "MPUB failed to read body size")
            if self._mpub_count < 0:
                return client_error("E_BAD_BODY", "MPUB failed to read message count")
            if self._mpub_size < 0:
                index = len(self._mpub_bodies)
                text = f"MPUB failed to read message({index}) body size"
                return client_error("E_BAD_MESSAGE", text)
            return client_error("E_BAD_MESSAGE", "MPUB failed to read message body")
        code = "E_BAD_MESSAGE" if name in ("PUB", "DPUB") else "E_BAD_BODY"
        what = "message body" if code == "E_BAD_MESSAGE" else "body"
        if self._body_size < 0:
            return client_error(code, f"{name} failed to read {what} size")
        return client_error(code, f"{name} failed to read {what}")

    # -- bodies ------------------------------------------------------------

    def _check_size(self, name: str, size: int) -> None:
        if name in ("PUB", "DPUB"):
            if size <= 0:
                raise client_error("E_BAD_MESSAGE", f"{name} invalid message body size {size}")
            if size > self.max_msg_size:
                raise client_error(
                    "E_BAD_MESSAGE", f"{name} message too big {size} > {self.max_msg_size}"
                )
        elif name == "MPUB":
            if size <= 0:
                raise client_error("E_BAD_BODY", f"MPUB invalid body size {size}")
            if size > self.max_body_size:
                raise client_error("E_BAD_BODY", f"MPUB body too big {size} > {self.max_body_size}")
        else:  # IDENTIFY, AUTH: nsqd checks "too big" first
            if size > self.max_body_size:
                raise client_error(
                    "E_BAD_BODY", f"{name} body too big {size} > {self.max_body_size}"
                )
            if size <= 0:
                raise client_error("E_BAD_BODY", f"{name} invalid body size {size}")

    def _read_body(self) -> Command | None:
        pending = self._pending
        if pending is None:
            return None
        buf = self._buf
        pos = self._pos
        if self._body_size < 0:
            if len(buf) - pos < 4:
                return None
            size = _SIZE.unpack_from(buf, pos)[0]
            self._check_size(pending.name, size)
            pos += 4
            self._pos = pos
            self._body_size = size
        if pending.name == "MPUB":
            return self._read_mpub(pending.topic)
        size = self._body_size
        if len(buf) - pos < size:
            return None
        body = bytes(buf[pos : pos + size])
        self._pos = pos + size
        self._pending = None
        self._body_size = -1
        name = pending.name
        if name == "PUB":
            return Pub(pending.topic, body)
        if name == "DPUB":
            return Dpub(pending.topic, pending.delay_ms, body)
        if name == "AUTH":
            return Auth(body)
        return Identify(body)

    def _read_mpub(self, topic: str) -> Command | None:
        """Read an MPUB's messages from the stream, as nsqd's ``readMPUB`` does.

        The declared body size was only checked against its limits: nsqd
        reads the count and each size-prefixed message from the connection
        itself, so a body shorter than declared waits for more bytes and
        bytes after the last message are read as the next command.
        """
        buf = self._buf
        if self._mpub_count < 0:
            if len(buf) - self._pos < 4:
                return None
            self._mpub_count = _mpub_count(_SIZE.unpack_from(buf, self._pos)[0], self.max_body_size)
            self._pos += 4
        bodies = self._mpub_bodies
        while len(bodies) < self._mpub_count:
            if self._mpub_size < 0:
                if len(buf) - self._pos < 4:
                    return None
                size = _SIZE.unpack_from(buf, self._pos)[0]
                self._mpub_size = _mpub_size(len(bodies), size, self.max_msg_size)
                self._pos += 4
            end = self._pos + self._mpub_size
            if len(buf) < end:
                return None
            bodies.append(bytes(buf[self._pos : end]))
            self._pos = end
            self._mpub_size = -1
        self._pending = None
        self._body_size = -1
        self._mpub_count = -1
        self._mpub_bodies = []
        return Mpub(topic, bodies)

    # -- command lines -----------------------------------------------------

    def _topic(self, name: str, raw: bytes, prefix: str = "") -> str:
        if not valid_topic_name(raw):
            raise client_error(
                "E_BAD_TOPIC", f"{prefix}{name} topic name {go_quote(raw)} is not valid"
            )
        return raw.decode("ascii")

    def _in_flight_state(self, name: str) -> None:
        if self.state != STATE_SUBSCRIBED and self.state != STATE_CLOSING:
            raise _invalid(f"cannot {name} in current state")

    def _fin(self, params: list[bytes]) -> Command:
        self._in_flight_state("FIN")
        if len(params) < 2:
            raise _invalid("FIN insufficient number of params")
        return Fin(_message_id(params[1]))

    def _touch(self, params: list[bytes]) -> Command:
        self._in_flight_state("TOUCH")
        if len(params) < 2:
            raise _invalid("TOUCH insufficient number of params")
        return Touch(_message_id(params[1]))

    def _req(self, params: list[bytes]) -> Command:
        self._in_flight_state("REQ")
        if len(params) < 3:
            raise _invalid("REQ insufficient number of params")
        message_id = _message_id(params[1])
        ms = _base10(params[2])
        if ms is None:
            raise _invalid(f"REQ could not parse timeout {_text(params[2])}")
        # nsqd clamps an out-of-range REQ timeout instead of refusing it
        return Req(message_id, min(ms, self.max_req_timeout_ms))

    def _rdy(self, params: list[bytes]) -> Command:
        if self.state == STATE_CLOSING:
            return _NOP  # nsqd ignores RDY after CLS
        if self.state != STATE_SUBSCRIBED:
            raise _invalid("cannot RDY in current state")
        count = 1
        if len(params) > 1:
            parsed = _base10(params[1])
            if parsed is None:
                raise _invalid(f"RDY could not parse count {_text(params[1])}")
            count = parsed
        if count > self.max_rdy_count:
            raise _invalid(f"RDY count {count} out of range 0-{self.max_rdy_count}")
        return Rdy(count)

    def _sub(self, params: list[bytes]) -> Command:
        if self.state != STATE_INIT:
            raise _invalid("cannot SUB in current state")
        if not self.heartbeats_enabled:
            raise _invalid("cannot SUB with heartbeats disabled")
        if len(params) < 3:
            raise _invalid("SUB insufficient number of parameters")
        topic = self._topic("SUB", params[1])
        if not valid_channel_name(params[2]):
            raise client_error(
                "E_BAD_CHANNEL", f"SUB channel name {go_quote(params[2])} is not valid"
            )
        return Sub(topic, params[2].decode("ascii"))

    def _pub(self, params: list[bytes]) -> _Body:
        if len(params) < 2:
            raise _invalid("PUB insufficient number of parameters")
        return _Body("PUB", self._topic("PUB", params[1]), 0)

    def _mpub(self, params: list[bytes]) -> _Body:
        if len(params) < 2:
            raise _invalid("MPUB insufficient number of parameters")
        # nsqd really repeats the code in this text
        return _Body("MPUB", self._topic("MPUB", params[1], "E_BAD_TOPIC "), 0)

    def _dpub(self, params: list[bytes]) -> _Body:
        if len(params) < 3:
            raise _invalid("DPUB insufficient number of parameters")
        topic = self._topic("DPUB", params[1])
        ms = _base10(params[2])
        if ms is None:
            raise _invalid(f"DPUB could not parse timeout {_text(params[2])}")
        if ms > self.max_req_timeout_ms:
            raise _invalid(f"DPUB timeout {ms} out of range 0-{self.max_req_timeout_ms}")
        return _Body("DPUB", topic, ms)

    def _auth(self, params: list[bytes]) -> _Body:
        if self.state != STATE_INIT:
            raise _invalid("cannot AUTH in current state")
        if len(params) != 1:
            raise _invalid("AUTH invalid number of parameters")
        return _Body("AUTH", "", 0)

    def _nop(self, params: list[bytes]) -> Command:
        return _NOP

    def _cls(self, params: list[bytes]) -> Command:
        if self.state != STATE_SUBSCRIBED:
            raise _invalid("cannot CLS in current state")
        return _CLS


def _mpub_count(count: int, max_body_size: int) -> int:
    """``count`` if nsqd accepts it as an MPUB's message count, else its error."""
    if count <= 0 or count > (max_body_size - 4) // 5:  # 4: the count, 5: a size and a byte
        raise client_error("E_BAD_BODY", f"MPUB invalid message count {count}")
    return count


def _mpub_size(index: int, size: int, max_msg_size: int) -> int:
    """``size`` if nsqd accepts it for the MPUB's message ``index``, else its error."""
    if size <= 0:
        raise client_error("E_BAD_MESSAGE", f"MPUB invalid message({index}) body size {size}")
    if size > max_msg_size:
        raise client_error("E_BAD_MESSAGE", f"MPUB message too big {size} > {max_msg_size}")
    return size


def split_mpub(body: bytes, max_msg_size: int, max_body_size: int) -> list[bytes]:
    """Split a whole ``MPUB`` body (HTTP ``/mpub?binary=true``), with nsqd's checks and errors.

    Like nsqd, bytes after the last message are ignored; a body that ends
    early is ``E_BAD_BODY``/``E_BAD_MESSAGE`` "failed to read".
    """
    n = len(body)
    if n < 4:
        raise client_error("E_BAD_BODY", "MPUB failed to read message count")
    count = _mpub_count(_SIZE.unpack_from(body, 0)[0], max_body_size)
    out: list[bytes] = []
    pos = 4
    for i in range(count):
        if n - pos < 4:
            raise client_error("E_BAD_MESSAGE", f"MPUB failed to read message({i}) body size")
        size = _mpub_size(i, _SIZE.unpack_from(body, pos)[0], max_msg_size)
        pos += 4
        end = pos + size
        if end > n:
            raise client_error("E_BAD_MESSAGE", "MPUB failed to read message body")
        out.append(body[pos:end])
        pos = end
    return out
