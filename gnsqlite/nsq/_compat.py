"""The names of pynsq's ``nsq._compat`` that code and tests written for pynsq import.

pynsq kept Python 2 shims here; on Python 3 they are plain aliases, and the
struct formats of the frame sizes, attempts and timestamps.
"""

from __future__ import annotations

import struct
from urllib import parse as urlparse
from urllib.parse import parse_qs, urlencode

__all__ = [
    "PY2",
    "bytes_types",
    "integer_types",
    "parse_qs",
    "string_types",
    "struct_h",
    "struct_l",
    "struct_q",
    "text_type",
    "to_bytes",
    "urlencode",
    "urlparse",
]

PY2 = False
bytes_types = (bytes, bytearray, memoryview)
text_type = str
string_types = (str,)
integer_types = (int,)
struct_l = struct.Struct(">l")
struct_q = struct.Struct(">q")
struct_h = struct.Struct(">h")


def to_bytes(
    x: bytes | bytearray | memoryview | str, charset: str = "utf-8", errors: str = "strict"
) -> bytes:
    """``x`` as bytes: bytes-like objects copied, ``str`` encoded with ``charset``."""
    if isinstance(x, bytes_types):
        return bytes(x)
    if isinstance(x, str):
        return x.encode(charset, errors)
    raise TypeError(f"expected bytes or a string, not {type(x)!r}")
