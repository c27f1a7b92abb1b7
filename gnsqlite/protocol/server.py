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
what a server sends.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..errors import ERROR_CLASSES, RemoteProtocolError, ServerError
from .commands import MAGIC_V2, MESSAGE_ID_LENGTH
from .frames import FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE, encode_frame
from .names import valid_channel_name, valid_topic_name

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

#: Client states, numbered as nsqd numbers them (``/stats`` shows them).
STATE_INIT = 0
STATE_SUBSCRIBED = 3
STATE_CLOSING = 4

#: nsqd reads commands through a 16 KiB buffer; a longer line ends the connection.
MAX_LINE_LENGTH = 16 * 1024

_SIZE = struct.Struct(">i")
_MESSAGE_HEADER = struct.Struct(">iiqH16s")


class Identify(NamedTuple):
    """``IDENTIFY`` with its raw JSON body."""

    body: bytes


class Auth(NamedTuple):
    """``AUTH`` with the secret."""

    secret: bytes


class Sub(NamedTuple):
    """``SUB <topic> <channel>``."""

    topic: str
    channel: str


class Pub(NamedTuple):
    """``PUB <topic>`` with one body."""

    topic: str
    body: bytes


class MpubStart(NamedTuple):
    """The line of ``MPUB <topic>`` was read; nsqd checks AUTH before the body."""

    topic: str


class Mpub(NamedTuple):
    """``MPUB <topic>`` with its message bodies."""

    topic: str
    bodies: list[bytes]


class Dpub(NamedTuple):
    """``DPUB <topic> <defer_ms>`` with one body."""

    topic: str
    delay_ms: int
    body: bytes


class Rdy(NamedTuple):
    """``RDY <count>``: how many messages may be in flight to this client."""

    ready_count: int


class Fin(NamedTuple):
    """``FIN <id>``."""

    message_id: bytes


class Req(NamedTuple):
    """``REQ <id> <timeout_ms>``; ``delay_ms`` is already clamped like nsqd."""

    message_id: bytes
    delay_ms: int


class Touch(NamedTuple):
    """``TOUCH <id>``."""

    message_id: bytes


class Cls(NamedTuple):
    """``CLS``: start closing."""


class Nop(NamedTuple):
    """``NOP`` (also what an ignored ``RDY`` after ``CLS`` becomes)."""


Command = (
    Identify | Auth | Sub | Pub | MpubStart | Mpub | Dpub | Rdy | Fin | Req | Touch | Cls | Nop
)

_NOP = Nop()
_CLS = Cls()


def client_error(code: str, text: str) -> ServerError:
    """The exception for an nsqd error: its class tells whether it is fatal."""
    cls = ERROR_CLASSES.get(code, ServerError)
    return cls(text, code=code)


def error_frame(error: ServerError) -> bytes:
    """The error frame nsqd sends for ``error`` (``"E_CODE text"``)."""
    data = f"{error.code} {error.text}" if error.text else error.code
    return encode_frame(FRAME_TYPE_ERROR, data.encode("utf-8", "replace"))


def response_frame(data: bytes) -> bytes:
    """A response frame (``OK``, ``_heartbeat_``, JSON ...)."""
    return encode_frame(FRAME_TYPE_RESPONSE, data)


def message_frame(message_id: bytes, body: bytes, timestamp: int, attempts: int) -> bytes:
    """A whole message frame: timestamp in ns, attempts, 16-byte id, body."""
    return _MESSAGE_HEADER.pack(len(body) + 30, 2, timestamp, attempts, message_id) + body


def go_quote(raw: bytes) -> str:
    """Quote ``raw`` roughly as Go's ``%q`` does (double quotes, escapes)."""
    out = ['"']
    for byte in raw:
        ch = chr(byte)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= byte < 0x7F:
            out.append(ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        else:
            out.append(f"\\x{byte:02x}")
    out.append('"')
    return "".join(out)


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
        max_msg_size: int = 1024 * 1024,
        max_body_size: int = 5 * 1024 * 1024,
        max_rdy_count: int = 2500,
        max_req_timeout_ms: int = 3_600_000,
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


# -- IDENTIFY --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IdentifyLimits:
    """What the server allows and offers; durations in milliseconds, sizes in bytes."""

    version: str
    max_rdy_count: int = 2500
    msg_timeout_ms: int = 60_000
    max_msg_timeout_ms: int = 900_000
    heartbeat_interval_ms: int = 30_000
    max_heartbeat_interval_ms: int = 60_000
    output_buffer_size: int = 16 * 1024
    max_output_buffer_size: int = 64 * 1024
    output_buffer_timeout_ms: int = 250
    min_output_buffer_timeout_ms: int = 25
    max_output_buffer_timeout_ms: int = 30_000
    tls: bool = False
    snappy: bool = True
    deflate: bool = True
    max_deflate_level: int = 6
    auth_required: bool = False


@dataclass(frozen=True, slots=True)
class Negotiated:
    """A client's settings after IDENTIFY; durations in milliseconds (0 = disabled).

    ``response`` is the response frame data to send (the JSON, or ``OK``);
    then, in this order, upgrade to TLS, snappy or deflate when set, each
    followed by an ``OK`` sent over the upgraded stream.
    """

    client_id: str
    hostname: str
    user_agent: str
    heartbeat_interval_ms: int
    output_buffer_size: int
    output_buffer_timeout_ms: int
    sample_rate: int
    msg_timeout_ms: int
    tls: bool
    snappy: bool
    deflate: bool
    deflate_level: int
    response: bytes


# nsqd v1.x's identifyDataV2 has no short_id/long_id (gone since 1.0): ignored like any
# unknown field
_STR_FIELDS = ("client_id", "hostname", "user_agent")
_INT_FIELDS = (
    "heartbeat_interval",
    "output_buffer_size",
    "output_buffer_timeout",
    "deflate_level",
    "sample_rate",
    "msg_timeout",
)
_BOOL_FIELDS = ("feature_negotiation", "tls_v1", "deflate", "snappy")


def _decode_identify(body: bytes) -> Mapping[str, Any]:
    failed = client_error("E_BAD_BODY", "IDENTIFY failed to decode JSON body")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # nesting deeper than Python's stack: refused too
        raise failed from None
    if data is None:
        data = {}  # Go's json.Unmarshal of null into a struct is a no-op, not an error
    if not isinstance(data, dict):
        raise failed
    for key in _STR_FIELDS:
        if key in data and data[key] is not None and not isinstance(data[key], str):
            raise failed
    for key in _INT_FIELDS:
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise failed
    for key in _BOOL_FIELDS:
        if data.get(key) is not None and not isinstance(data[key], bool):
            raise failed
    return data


def negotiate_identify(body: bytes, limits: IdentifyLimits) -> Negotiated:
    """Apply an IDENTIFY body as nsqd does; raises the fatal error nsqd would send."""
    data = _decode_identify(body)

    def bad(text: str) -> ServerError:
        return client_error("E_BAD_BODY", "IDENTIFY " + text)

    heartbeat = limits.heartbeat_interval_ms
    wanted = data.get("heartbeat_interval") or 0
    if wanted == -1:
        heartbeat = 0
    elif wanted != 0:
        if not 1000 <= wanted <= limits.max_heartbeat_interval_ms:
            raise bad(f"heartbeat interval ({wanted}) is invalid")
        heartbeat = wanted

    buffer_timeout = limits.output_buffer_timeout_ms
    wanted = data.get("output_buffer_timeout") or 0
    if wanted == -1:
        buffer_timeout = 0
    elif wanted != 0:
        if not (
            limits.min_output_buffer_timeout_ms <= wanted <= limits.max_output_buffer_timeout_ms
        ):
            raise bad(f"output buffer timeout ({wanted}) is invalid")
        buffer_timeout = wanted

    buffer_size = limits.output_buffer_size
    wanted = data.get("output_buffer_size") or 0
    if wanted == -1:
        buffer_size = 1
        buffer_timeout = 0
    elif wanted != 0:
        if not 64 <= wanted <= limits.max_output_buffer_size:
            raise bad(f"output buffer size ({wanted}) is invalid")
        buffer_size = wanted

    sample_rate = data.get("sample_rate") or 0
    if not 0 <= sample_rate <= 99:
        raise bad(f"sample rate ({sample_rate}) is invalid")

    msg_timeout = limits.msg_timeout_ms
    wanted = data.get("msg_timeout") or 0
    if wanted != 0:
        if not 1000 <= wanted <= limits.max_msg_timeout_ms:
            raise bad(f"msg timeout ({wanted}) is invalid")
        msg_timeout = wanted

    negotiate = bool(data.get("feature_negotiation"))
    tls = negotiate and limits.tls and bool(data.get("tls_v1"))
    deflate = negotiate and limits.deflate and bool(data.get("deflate"))
    deflate_level = 6
    wanted = data.get("deflate_level") or 0
    if deflate and wanted > 0:
        deflate_level = wanted
    deflate_level = min(deflate_level, limits.max_deflate_level)
    snappy = negotiate and limits.snappy and bool(data.get("snappy"))
    if deflate and snappy:
        raise client_error("E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression")

    if negotiate:
        response = json.dumps(
            {
                "max_rdy_count": limits.max_rdy_count,
                "version": limits.version,
                "max_msg_timeout": limits.max_msg_timeout_ms,
                "msg_timeout": msg_timeout,
                "tls_v1": tls,
                "deflate": deflate,
                "deflate_level": deflate_level,
                "max_deflate_level": limits.max_deflate_level,
                "snappy": snappy,
                "sample_rate": sample_rate,
                "auth_required": limits.auth_required,
                "output_buffer_size": buffer_size,
                "output_buffer_timeout": buffer_timeout,
            },
            separators=(",", ":"),
        ).encode("ascii")
    else:
        response = b"OK"
    return Negotiated(
        client_id=data.get("client_id") or "",
        hostname=data.get("hostname") or "",
        user_agent=data.get("user_agent") or "",
        heartbeat_interval_ms=heartbeat,
        output_buffer_size=buffer_size,
        output_buffer_timeout_ms=buffer_timeout,
        sample_rate=sample_rate,
        msg_timeout_ms=msg_timeout,
        tls=tls,
        snappy=snappy,
        deflate=deflate,
        deflate_level=deflate_level,
        response=response,
    )
