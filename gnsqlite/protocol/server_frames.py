"""What an nsqd-compatible server sends: error, response and message frames.

Pure: bytes out, no I/O. :func:`client_error` builds the exception for an
nsqd error code (its class says whether it is fatal).
"""

from __future__ import annotations

import struct

from ..errors import ERROR_CLASSES, ServerError
from .frames import FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE, encode_frame

__all__ = ["client_error", "error_frame", "go_quote", "message_frame", "response_frame"]

_MESSAGE_HEADER = struct.Struct(">iiqH16s")


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
