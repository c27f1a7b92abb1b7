"""Frames and messages: decoding nsqd's byte stream, and encoding it for servers.

A frame on the wire is ``[int32 size][int32 frame type][data]``, where size
counts the frame type and the data. Message frames carry
``[int64 timestamp ns][uint16 attempts][16-byte id][body]``.

:class:`FrameDecoder` is incremental: feed it bytes split anywhere and it
yields the same frames. It checks every size before it buffers or slices, so a
hostile length prefix raises :class:`~gnsqlite.errors.RemoteProtocolError`
without a large allocation.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar, overload

from .._mypyc import mypyc_attr
from ..errors import RemoteProtocolError, WrongPortError
from .defaults import MAX_FRAME_SIZE
from .ports import (
    HTTP_AS_FRAME_SIZE,
    LOOKUPD_TCP_AS_FRAME_TYPE,
    http_on_tcp_port,
    lookupd_tcp_on_nsqd_tcp_port,
)

__all__ = [
    "FRAME_TYPE_RESPONSE",
    "FRAME_TYPE_ERROR",
    "FRAME_TYPE_MESSAGE",
    "FRAME_TYPES",
    "HEARTBEAT",
    "OK",
    "CLOSE_WAIT",
    "MESSAGE_HEADER_SIZE",
    "WireMessage",
    "MessageFields",
    "FrameDecoder",
    "decode_message",
    "encode_frame",
    "encode_message",
]

# Final: the compiled build inlines them (a plain global is a dict lookup per use there).
FRAME_TYPE_RESPONSE: Final = 0
FRAME_TYPE_ERROR: Final = 1
FRAME_TYPE_MESSAGE: Final = 2
FRAME_TYPES = (FRAME_TYPE_RESPONSE, FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE)

HEARTBEAT = b"_heartbeat_"
OK: Final = b"OK"
CLOSE_WAIT = b"CLOSE_WAIT"

#: timestamp (8) + attempts (2) + id (16)
MESSAGE_HEADER_SIZE: Final = 26

_HEADER = struct.Struct(">ii")
_MESSAGE = struct.Struct(">qH16s")
#: A message frame's frame header and message header, read in one call.
_MESSAGE_FRAME = struct.Struct(">iiqH16s")
# The unpackers, bound once: a bound method taken per decoding call is an object
# made and freed each time (once per message when messages come one at a time).
_unpack_header: Final = _HEADER.unpack_from
_unpack_message_frame: Final = _MESSAGE_FRAME.unpack_from
_F = TypeVar("_F", bound="MessageFields")


# WireMessage stays a Python class in the compiled build: instances are made with
# object.__new__ and the frozen slots' setters.
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class WireMessage:
    """A message as nsqd sends it.

    ``timestamp`` is nanoseconds since the epoch when nsqd received it,
    ``attempts`` how many times it has been delivered (this delivery
    included), ``id`` the 16 ASCII hex bytes that name it in FIN/REQ/TOUCH.
    """

    id: bytes
    body: bytes
    timestamp: int
    attempts: int


@mypyc_attr(allow_interpreted_subclasses=True)  # the compiled build: others subclass it
class MessageFields:
    """The fields of a message frame, for a class that is built straight from the frame.

    A subclass (its own ``__slots__`` for its other attributes) handed to
    :meth:`FrameDecoder.frames_decoding_messages` or :func:`decode_message`
    gets its instances made without ``__init__`` (``cls.__new__(cls)``;
    plain attribute assignment must work on them) with these four set:
    ``wire_id`` (the 16 id bytes), ``body``, ``timestamp`` (nanoseconds
    since the epoch) and ``attempts``; the rest is the
    receiver's to fill in. One object per message instead of a frame
    message and the receiver's own.
    """

    __slots__ = ("attempts", "body", "timestamp", "wire_id")

    wire_id: bytes
    body: bytes
    timestamp: int
    attempts: int


# The slots' own setters: building a frozen WireMessage without its __init__,
# which goes through object.__setattr__ once per field.
_set_id = vars(WireMessage)["id"].__set__
_set_body = vars(WireMessage)["body"].__set__
_set_timestamp = vars(WireMessage)["timestamp"].__set__
_set_attempts = vars(WireMessage)["attempts"].__set__
_new: Callable[[type], Any] = object.__new__


@overload
def decode_message(data: bytes | memoryview) -> WireMessage: ...
@overload
def decode_message(data: bytes | memoryview, into: type[_F]) -> _F: ...
def decode_message(data: bytes | memoryview, into: type[MessageFields] | None = None) -> Any:
    """Decode the data of a message frame, or raise RemoteProtocolError.

    With ``into`` (a :class:`MessageFields` subclass), an instance of it
    with the four fields set (see :class:`MessageFields`); else a :class:`WireMessage`.
    """
    if len(data) < MESSAGE_HEADER_SIZE:
        raise RemoteProtocolError(
            f"a message frame needs {MESSAGE_HEADER_SIZE} bytes of header, got {len(data)}"
        )
    timestamp, attempts, message_id = _MESSAGE.unpack_from(data, 0)
    body = bytes(data[MESSAGE_HEADER_SIZE:])
    if into is None:
        return WireMessage(message_id, body, timestamp, attempts)
    built = into.__new__(into)  # not object.__new__: a compiled class refuses that
    built.wire_id = message_id
    built.body = body
    built.timestamp = timestamp
    built.attempts = attempts
    return built


def encode_message(message: WireMessage) -> bytes:
    """The data of a message frame (without the frame header)."""
    return _MESSAGE.pack(message.timestamp, message.attempts, message.id) + message.body


def encode_frame(frame_type: int, data: bytes) -> bytes:
    """A whole frame: size, frame type and data."""
    return _HEADER.pack(len(data) + 4, frame_type) + data


#: Bytes left undecoded below which :meth:`FrameDecoder.feed` copies them with
#: the new bytes into one ``bytes`` (above: they grow in a ``bytearray``).
_SHORT_REST: Final = 4 * 1024
#: The smallest size prefix of a message frame: the frame type and the message header.
_SMALLEST_MESSAGE: Final = 4 + MESSAGE_HEADER_SIZE


class FrameDecoder:
    """Turn a byte stream into ``(frame_type, data)`` pairs.

    ``max_frame_size`` bounds the size prefix (frame type plus data, in
    bytes). :meth:`feed` buffers bytes; :meth:`next_frame` returns one frame or
    ``None`` when more bytes are needed; :meth:`frames` drains every complete
    frame at once. Message frames are returned undecoded (see
    :func:`decode_message`) so a caller can route them cheaply.
    """

    __slots__ = ("_buf", "_into", "_new", "_pos", "max_frame_size")

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        if max_frame_size < MESSAGE_HEADER_SIZE + 4:
            raise ValueError(f"max_frame_size must be at least 30 bytes, not {max_frame_size}")
        self.max_frame_size = max_frame_size
        # Bytes, so a frame's data is one slice (one copy); a bytearray only
        # while a long rest (a large frame arriving in pieces) accumulates.
        self._buf: bytes | bytearray = b""
        self._pos = 0
        # The last ``into`` of frames_decoding_messages and how its instances are made,
        # kept: looking up ``into.__new__`` makes a method object each time.
        self._into: type[MessageFields] | None = None
        self._new: Callable[[type], Any] = _new

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes to the buffer.

        Amortized O(len(data)): what is left undecoded is copied again only
        while it is short (below :data:`_SHORT_REST` bytes); a longer rest
        grows in place.
        """
        buf = self._buf
        pos = self._pos
        rest = len(buf) - pos
        self._pos = 0
        if rest <= 0:  # everything decoded: the received bytes are the buffer
            self._buf = data if type(data) is bytes else bytes(data)
        elif rest < _SHORT_REST:
            self._buf = bytes(buf[pos:]) + data  # bytes(): no copy of a bytes slice
        elif type(buf) is bytearray:
            if pos:
                del buf[:pos]
            buf += data
        else:
            grown = bytearray(buf[pos:])
            grown += data
            self._buf = grown

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf) - self._pos

    def take_unprocessed(self) -> bytes:
        """Remove and return every byte not yet decoded.

        Used at a TLS or compression upgrade: the bytes after the last frame
        read belong to the upgraded stream and must be decoded by it.
        """
        rest = bytes(self._buf[self._pos :])
        self._buf = b""
        self._pos = 0
        return rest

    def next_frame(self) -> tuple[int, bytes] | None:
        """Return the next complete frame, or ``None`` if more bytes are needed."""
        buf = self._buf
        pos = self._pos
        if len(buf) - pos < 8:
            return None
        size, frame_type = _HEADER.unpack_from(buf, pos)
        self._check(size, frame_type)
        end = pos + 4 + size
        if len(buf) < end:
            return None
        self._pos = end
        data = buf[pos + 8 : end]
        return frame_type, data if type(data) is bytes else bytes(data)

    def frames(self) -> list[tuple[int, bytes]]:
        """Return every complete frame buffered so far, in order."""
        return self._drain(False)  # type: ignore[return-value]

    def frames_decoding_messages(
        self, into: type[MessageFields] | None = None, others: list[int] | None = None
    ) -> list[tuple[int, bytes] | WireMessage | MessageFields]:
        """Like :meth:`frames`, with each message frame decoded into a bare :class:`WireMessage`.

        The message is read straight from the buffer (its body copied once)
        and stands alone in the list (no ``(frame_type, data)`` pair: its
        type says it is a message frame), which saves a copy, a call and a
        tuple per message on the consumer's hot path. Other frames come as
        :meth:`frames` gives them. With ``into`` (a :class:`MessageFields`
        subclass) each message is an instance of it instead. With ``others``
        (a list), the positions in the result of the frames that are not
        messages are appended to it: a caller that replaces only those need
        not look at every item.
        """
        return self._drain(True, into, others)

    def _drain(
        self,
        decode: bool,
        into: type[MessageFields] | None = None,
        others: list[int] | None = None,
    ) -> list[tuple[int, bytes] | WireMessage | MessageFields]:
        out: list[tuple[int, bytes] | WireMessage | MessageFields] = []
        buf = self._buf
        pos = self._pos
        n = len(buf)
        body_at = 8 + MESSAGE_HEADER_SIZE  # a message's body, from its frame's start
        unpack = _unpack_header
        unpack_message = _unpack_message_frame
        largest = self.max_frame_size
        whole = _SMALLEST_MESSAGE + 4  # the shortest whole message frame, in bytes
        copy = type(buf) is not bytes  # a slice of a bytearray is a bytearray
        # Declared, so the compiled build compares and adds them as machine integers
        # (struct gives Any); the interpreter never evaluates these annotations.
        size: int
        frame_type: int
        body: bytes
        as_bytes: bytes = buf if isinstance(buf, bytes) else b""  # sliced with no type test
        # Instances of ``into`` are made without __init__, by its own __new__: a
        # compiled class refuses object.__new__.
        if into is not self._into:
            self._into = into
            self._new = _new if into is None else into.__new__
        new = self._new
        while True:
            left = n - pos
            if left < 8:
                break
            if decode and left >= whole:
                # Both headers in one call; for another frame the message
                # fields are bytes after it, never used. With fewer bytes
                # buffered, a message frame is incomplete (it breaks below).
                size, frame_type, timestamp, attempts, message_id = unpack_message(buf, pos)
            else:
                size, frame_type = unpack(buf, pos)
            end = pos + 4 + size
            # A message or an answer of a sane size needs no other check.
            if frame_type == FRAME_TYPE_MESSAGE:
                if size < _SMALLEST_MESSAGE or size > largest:
                    self._check(size, frame_type)
                if n < end:
                    break
                if decode:
                    body = (
                        bytes(buf[pos + body_at : end]) if copy else as_bytes[pos + body_at : end]
                    )
                    if into is not None:  # the receiver's own class: one object per message
                        built: MessageFields = new(into)
                        built.wire_id = message_id  # plain slot stores: no call each
                        built.body = body  # bytes once copied
                        built.timestamp = timestamp
                        built.attempts = attempts
                        out.append(built)
                    else:
                        message = _new(WireMessage)
                        _set_id(message, message_id)
                        _set_body(message, body)
                        _set_timestamp(message, timestamp)
                        _set_attempts(message, attempts)
                        out.append(message)
                    pos = end
                    continue
            elif not (frame_type == FRAME_TYPE_RESPONSE and 4 <= size <= largest):
                self._check(size, frame_type)
            if n < end:
                break
            if others is not None:
                others.append(len(out))
            data = buf[pos + 8 : end]
            out.append((frame_type, bytes(data) if copy else data))  # type: ignore[arg-type]
            pos = end
        self._pos = pos
        return out

    def _check(self, size: int, frame_type: int) -> None:
        if size < 4:
            raise RemoteProtocolError(f"impossible frame size {size}: it must count the frame type")
        if size == HTTP_AS_FRAME_SIZE:
            raise WrongPortError(http_on_tcp_port())
        if frame_type == LOOKUPD_TCP_AS_FRAME_TYPE:
            raise WrongPortError(lookupd_tcp_on_nsqd_tcp_port())
        if size > self.max_frame_size:
            raise RemoteProtocolError(
                f"frame size {size} exceeds the maximum of {self.max_frame_size} bytes"
            )
        if frame_type not in FRAME_TYPES:
            raise RemoteProtocolError(f"unknown frame type {frame_type}")
        if frame_type == FRAME_TYPE_MESSAGE and size - 4 < MESSAGE_HEADER_SIZE:
            raise RemoteProtocolError(
                f"a message frame of {size - 4} bytes is too short for its"
                f" {MESSAGE_HEADER_SIZE}-byte header"
            )
