"""The NSQ TCP protocol V2 as pure code: no sockets, no gevent, no clocks.

* :mod:`.commands`: every command as a function returning its wire bytes.
* :mod:`.frames`: the incremental frame decoder and message decoding.
* :mod:`.names`: topic and channel name rules.
* :mod:`.client`: the client connection state machine (bytes in, events out).
* :mod:`.events`: the events that machine reports.
* :mod:`.defaults`: nsqd's defaults (sizes, timeouts, RDY), named once.

>>> import gnsqlite.protocol as p
>>> p.pub("clicks", b"hi")
b'PUB clicks\\n\\x00\\x00\\x00\\x02hi'
"""

from __future__ import annotations

from . import defaults
from .client import ClientConnection, ClientState
from .commands import (
    MAGIC_V2,
    MESSAGE_ID_LENGTH,
    as_body,
    auth,
    check_message_id,
    cls,
    dpub,
    fin,
    identify,
    mpub,
    mpub_body,
    nop,
    pub,
    rdy,
    req,
    sub,
    to_milliseconds,
    touch,
)
from .events import (
    Authenticated,
    CloseWait,
    Delivery,
    ErrorReceived,
    Event,
    Heartbeat,
    Identified,
    MessageReceived,
    Response,
    Upgraded,
)
from .frames import (
    CLOSE_WAIT,
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    MESSAGE_HEADER_SIZE,
    OK,
    FrameDecoder,
    MessageFields,
    WireMessage,
    decode_message,
    encode_frame,
    encode_message,
)
from .names import (
    check_channel_name,
    check_topic_name,
    is_ephemeral,
    valid_channel_name,
    valid_topic_name,
)

__all__ = [
    "defaults",
    "ClientConnection",
    "ClientState",
    "MAGIC_V2",
    "MESSAGE_ID_LENGTH",
    "as_body",
    "auth",
    "check_message_id",
    "cls",
    "dpub",
    "fin",
    "identify",
    "mpub",
    "mpub_body",
    "nop",
    "pub",
    "rdy",
    "req",
    "sub",
    "to_milliseconds",
    "touch",
    "Authenticated",
    "CloseWait",
    "ErrorReceived",
    "Event",
    "Heartbeat",
    "Identified",
    "MessageReceived",
    "Delivery",
    "Response",
    "Upgraded",
    "CLOSE_WAIT",
    "FRAME_TYPE_ERROR",
    "FRAME_TYPE_MESSAGE",
    "FRAME_TYPE_RESPONSE",
    "HEARTBEAT",
    "MESSAGE_HEADER_SIZE",
    "OK",
    "FrameDecoder",
    "WireMessage",
    "MessageFields",
    "decode_message",
    "encode_frame",
    "encode_message",
    "check_channel_name",
    "check_topic_name",
    "is_ephemeral",
    "valid_channel_name",
    "valid_topic_name",
]
