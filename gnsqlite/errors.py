"""The exceptions gnsqlite raises.

Every exception derives from :class:`NSQError`. Each family also derives from
the built-in exception a caller would naturally catch:

* :class:`ConfigError`, :class:`InvalidNameError` and :class:`EnvelopeError`
  are ``ValueError``\\ s:
  the caller passed something wrong, and the message says what to fix.
* :class:`LocalProtocolError` means *this* side misused the protocol (a
  command sent out of order); :class:`RemoteProtocolError` means the peer sent
  bytes that break the protocol.
* :class:`ServerError` subclasses carry nsqd's ``E_*`` code in ``.code``, its
  text in ``.text`` and whether nsqd closes the connection after it in
  ``.fatal``.
* :class:`NSQConnectionError` is a ``ConnectionError`` carrying the address;
  :class:`ConnectionClosedError` ("you closed it") is distinct from
  :class:`BrokenConnectionError` ("it broke").
* :class:`NSQTimeoutError` is a ``TimeoutError``.

This module is pure: it imports nothing from gevent or the socket layer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = [
    "NSQError",
    "ConfigError",
    "InvalidNameError",
    "MessageTooLargeError",
    "EnvelopeError",
    "ProtocolError",
    "LocalProtocolError",
    "RemoteProtocolError",
    "WrongPortError",
    "NegotiationError",
    "ServerError",
    "InvalidError",
    "BadBodyError",
    "BadTopicError",
    "BadChannelError",
    "BadMessageError",
    "PubFailedError",
    "MPubFailedError",
    "DPubFailedError",
    "FinFailedError",
    "ReqFailedError",
    "TouchFailedError",
    "AuthFailedError",
    "UnauthorizedError",
    "ERROR_CLASSES",
    "error_from_frame",
    "NSQConnectionError",
    "ConnectionClosedError",
    "BrokenConnectionError",
    "NoConnectionsError",
    "NSQTimeoutError",
    "map_io_errors",
]


class NSQError(Exception):
    """The base of every exception raised by gnsqlite."""


class ConfigError(NSQError, ValueError):
    """An option has a value outside its allowed type or range."""


class InvalidNameError(NSQError, ValueError):
    """A topic or channel name breaks NSQ's naming rules."""


class MessageTooLargeError(NSQError, ValueError):
    """A message or batch is larger than nsqd accepts; nothing was sent."""


class EnvelopeError(NSQError, ValueError):
    """Bytes that are not a valid envelope: a dead-letter one (:mod:`gnsqlite.deadletter`)
    or a trace one (:mod:`gnsqlite.trace_envelope`); or what cannot be put in one."""


class ProtocolError(NSQError):
    """Base of protocol misuse by either side."""


class LocalProtocolError(ProtocolError):
    """This side tried something the protocol forbids in the current state."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that break the NSQ protocol."""


class WrongPortError(RemoteProtocolError):
    """The server speaks another protocol on this port: nsqd's (or nsqlookupd's) HTTP
    port given where its TCP port belongs, or back. Retrying cannot help; the
    message names the port to give (see :mod:`gnsqlite.protocol.ports`)."""


class NegotiationError(NSQError):
    """nsqd cannot provide a feature this client requires (TLS, AUTH ...)."""


class ServerError(NSQError):
    """An error frame sent by nsqd.

    ``code`` is the ``E_*`` code (``"E_BAD_TOPIC"``), ``text`` the rest of the
    frame, and ``fatal`` tells whether nsqd closes the connection after it.
    Codes this library does not know map to this class itself, fatal.
    """

    code: str = "E_UNKNOWN"
    fatal: bool = True

    def __init__(self, text: str = "", code: str | None = None) -> None:
        if code is not None:
            self.code = code
        self.text = text
        super().__init__(f"{self.code} {text}".rstrip())


class InvalidError(ServerError):
    """``E_INVALID``: a malformed or out-of-order command."""

    code = "E_INVALID"


class BadBodyError(ServerError):
    """``E_BAD_BODY``: a command body of the wrong size or shape."""

    code = "E_BAD_BODY"


class BadTopicError(ServerError):
    """``E_BAD_TOPIC``: an invalid topic name."""

    code = "E_BAD_TOPIC"


class BadChannelError(ServerError):
    """``E_BAD_CHANNEL``: an invalid channel name."""

    code = "E_BAD_CHANNEL"


class BadMessageError(ServerError):
    """``E_BAD_MESSAGE``: a message of the wrong size."""

    code = "E_BAD_MESSAGE"


class PubFailedError(ServerError):
    """``E_PUB_FAILED``: nsqd could not store the message."""

    code = "E_PUB_FAILED"


class MPubFailedError(ServerError):
    """``E_MPUB_FAILED``: nsqd could not store the batch."""

    code = "E_MPUB_FAILED"


class DPubFailedError(ServerError):
    """``E_DPUB_FAILED``: nsqd could not store the deferred message."""

    code = "E_DPUB_FAILED"


class FinFailedError(ServerError):
    """``E_FIN_FAILED``: FIN of an id not in flight; the connection stays up."""

    code = "E_FIN_FAILED"
    fatal = False


class ReqFailedError(ServerError):
    """``E_REQ_FAILED``: REQ of an id not in flight; the connection stays up."""

    code = "E_REQ_FAILED"
    fatal = False


class TouchFailedError(ServerError):
    """``E_TOUCH_FAILED``: TOUCH of an id not in flight; the connection stays up."""

    code = "E_TOUCH_FAILED"
    fatal = False


class AuthFailedError(ServerError):
    """``E_AUTH_FAILED``: nsqd could not check the secret with its auth server."""

    code = "E_AUTH_FAILED"


class UnauthorizedError(ServerError):
    """``E_UNAUTHORIZED``: the secret grants no permission for this action."""

    code = "E_UNAUTHORIZED"


ERROR_CLASSES: dict[str, type[ServerError]] = {
    cls.code: cls
    for cls in (
        InvalidError,
        BadBodyError,
        BadTopicError,
        BadChannelError,
        BadMessageError,
        PubFailedError,
        MPubFailedError,
        DPubFailedError,
        FinFailedError,
        ReqFailedError,
        TouchFailedError,
        AuthFailedError,
        UnauthorizedError,
    )
}


def error_from_frame(data: bytes) -> ServerError:
    """Build the exception for the payload of an error frame.

    ``b"E_BAD_TOPIC PUB topic name 'x y' is not valid"`` gives a
    :class:`BadTopicError` whose ``text`` is everything after the code. An
    unknown code gives a plain :class:`ServerError` keeping code and text.
    """
    decoded = data.decode("utf-8", "replace")
    code, _, text = decoded.partition(" ")
    cls = ERROR_CLASSES.get(code)
    if cls is None:
        return ServerError(text, code=code or "E_UNKNOWN")
    return cls(text)


class NSQConnectionError(NSQError, ConnectionError):
    """A connection to ``address`` (``"host:port"``) failed or is unusable."""

    def __init__(self, address: str, message: str) -> None:
        self.address = address
        super().__init__(f"{address}: {message}")


class ConnectionClosedError(NSQConnectionError):
    """The connection was closed by this side; it cannot be used any more."""


class BrokenConnectionError(NSQConnectionError):
    """The connection broke: a network error, EOF, or a fatal server error."""


class NoConnectionsError(NSQConnectionError):
    """Every nsqd tried failed; ``errors`` maps each ``"host:port"`` to its error."""

    def __init__(
        self, errors: dict[str, BaseException], message: str = "every nsqd failed"
    ) -> None:
        self.errors = dict(errors)
        detail = "; ".join(
            str(err) if str(err).startswith(f"{addr}:") else f"{addr}: {err}"
            for addr, err in self.errors.items()
        )
        addresses = ", ".join(self.errors) or "no nsqd"
        super().__init__(addresses, f"{message}" + (f" ({detail})" if detail else ""))


class NSQTimeoutError(NSQError, TimeoutError):
    """An operation did not complete within its timeout."""


@contextlib.contextmanager
def map_io_errors(name: str, what: str, *kinds: type[Exception]) -> Iterator[None]:
    """Translate an I/O failure, once, at the edge (httpcore's ``map_exceptions``).

    An exception of ``kinds`` (default ``OSError``, ``ssl.SSLError`` included)
    leaves the block as :class:`BrokenConnectionError`
    ``"<name>: <what>: <the error>"`` with the original as ``__cause__``. The
    library's own errors pass unchanged (some of them are ``OSError`` too).
    """
    caught = kinds or (OSError,)
    try:
        yield
    except NSQError:
        raise
    except caught as exc:
        raise BrokenConnectionError(name, f"{what}: {exc}") from exc
