"""Telling a port from its neighbour by the answer read on the wrong one.

nsqd listens on a TCP port (usually 4150) and an HTTP port (usually 4151),
nsqlookupd on 4160 and 4161: giving one for the other is the commonest
newcomer mistake. The client then reads the other protocol's answer:
``HTTP/1.1 400 Bad Request`` where a frame size belongs (its first four
bytes read as the size 1,213,486,160), or ``E_BAD_PROTOCOL`` in NSQ's framing
where an HTTP status line belongs. These pure functions recognise both and
say which port was given and which one to give; retrying cannot help.
"""

from __future__ import annotations

__all__ = [
    "HTTP_AS_FRAME_SIZE",
    "LOOKUPD_TCP_AS_FRAME_TYPE",
    "http_on_tcp_port",
    "lookupd_tcp_on_nsqd_tcp_port",
    "tcp_answer_on_http_port",
]

#: ``HTTP`` (an HTTP server's first bytes) read as a frame size.
HTTP_AS_FRAME_SIZE = int.from_bytes(b"HTTP", "big")
#: ``E_BA`` read as a frame type: nsqlookupd's TCP port answering the V2 magic
#: with ``[size]E_BAD_PROTOCOL`` (no frame type).
LOOKUPD_TCP_AS_FRAME_TYPE = int.from_bytes(b"E_BA", "big")

_BAD_PROTOCOL = b"E_BAD_PROTOCOL"
_NSQD_ERROR_FRAME = (len(_BAD_PROTOCOL) + 4).to_bytes(4, "big") + (1).to_bytes(4, "big")


def http_on_tcp_port() -> str:
    """What to say when an HTTP server answered on the port given as nsqd's TCP one."""
    return (
        "it answered in HTTP: that is an HTTP port (nsqd's is usually 4151, nsqlookupd's"
        " 4161); give nsqd's TCP port (usually 4150)"
    )


def lookupd_tcp_on_nsqd_tcp_port() -> str:
    """What to say when nsqlookupd's TCP port answered where nsqd's TCP port was meant."""
    return (
        "it answered E_BAD_PROTOCOL as nsqlookupd does: that is nsqlookupd's TCP port"
        " (usually 4160); give nsqd's TCP port (usually 4150)"
    )


def tcp_answer_on_http_port(answer: bytes) -> str | None:
    """What to say when ``answer``, read where an HTTP status line belongs, is NSQ's TCP protocol.

    ``None`` when it is not (a real, or a merely broken, HTTP answer).
    """
    if _BAD_PROTOCOL not in answer[:32]:
        return None
    if answer.startswith(_NSQD_ERROR_FRAME):
        which, tcp, http = "nsqd's", "4150", "4151"
    else:
        which, tcp, http = "nsqlookupd's", "4160", "4161"
    return (
        f"it answered E_BAD_PROTOCOL in NSQ's TCP protocol, not HTTP: that is {which} TCP port"
        f" (usually {tcp}); give its HTTP port (usually {http})"
    )
