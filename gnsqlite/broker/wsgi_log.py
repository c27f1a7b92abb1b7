"""One plain log line for a bad HTTP request, for the broker's and lookupd's HTTP servers.

gevent's pywsgi logs a request it cannot parse with the socket's repr
(``<gevent._socket3.socket at 0x... fd=9 ...>: (from ('127.0.0.1', 39344))
Invalid HTTP method: ...``). :class:`PlainLogHandler` says it as nsqd's own
logs would: ``HTTP: client(127.0.0.1:39344) bad request: ...``, naming the
usual cause when the bytes are NSQ's TCP magic (a TCP client given the HTTP
port).
"""

from __future__ import annotations

import re
from typing import Any

import gevent.pywsgi

__all__ = ["PlainLogHandler", "plain_error_line"]

_FROM = re.compile(r"^\(from [^)]*\)\) ?|^\(from [^)]*\) ?")


def plain_error_line(client: str, message: str) -> str:
    """The log line for a request from ``client`` (``host:port``) refused with ``message``."""
    message = _FROM.sub("", message).strip()
    hint = ""
    if "'  V" in message:  # "  V2" (nsqd) or "  V1" (nsqlookupd): NSQ's TCP magic
        hint = " (an NSQ TCP client given the HTTP port?)"
    return f"HTTP: client({client}) bad request: {message}{hint}"


class PlainLogHandler(gevent.pywsgi.WSGIHandler):
    """pywsgi's handler, logging a refused request as one plain line (no socket repr)."""

    def log_error(self, msg: str, *args: Any) -> None:
        """Write the line to the server's error log."""
        message = msg % args if args else msg
        address: Any = self.client_address
        if isinstance(address, tuple) and len(address) >= 2:
            client = f"{address[0]}:{address[1]}"
        else:
            client = str(address or "-")
        self.server.error_log.write(plain_error_line(client, message) + "\n")
