"""The exceptions of the pynsq drop-in, and how gnsqlite's errors become them.

pynsq code catches ``nsq.Error`` and checks ``isinstance(data, nsq.Error)``
in ``Writer`` callbacks, so the drop-in reports failures as these classes.
The gnsqlite exception behind one is kept as ``__cause__`` (and as
``SendError.error``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..errors import (
    ConfigError,
    InvalidNameError,
    MessageTooLargeError,
    NSQConnectionError,
    NSQError,
    ServerError,
)

__all__ = [
    "ArgumentError",
    "ConnectionClosedError",
    "Error",
    "IntegrityError",
    "InvalidNameArgumentError",
    "SendError",
    "as_nsq_error",
    "pynsq_arguments",
]


class Error(Exception):
    """Base of every error the drop-in hands to pynsq-style code.

    An error frame from nsqd is an ``Error`` whose only argument is the
    frame's bytes (``b"E_BAD_TOPIC ..."``), as in pynsq.
    """


class SendError(Error):
    """A command could not be sent (no open connection, or sending failed).

    ``msg`` says what failed; ``error`` is the underlying exception or ``None``.
    """

    def __init__(self, msg: str, error: BaseException | None = None) -> None:
        super().__init__(msg, error)
        self.msg = msg
        self.error = error

    def __str__(self) -> str:
        return f"SendError: {self.msg} ({self.error})"

    __repr__ = __str__


class ConnectionClosedError(Error):
    """The connection closed before nsqd answered."""


class IntegrityError(Error):
    """nsqd sent something that could not be decoded."""


def as_nsq_error(exc: BaseException) -> Error:
    """The drop-in error for a gnsqlite exception, with the original as ``__cause__``."""
    error: Error
    if isinstance(exc, Error):
        return exc
    if isinstance(exc, ServerError):
        error = Error(f"{exc.code} {exc.text}".rstrip().encode("utf-8"))
    elif isinstance(exc, NSQConnectionError):
        error = ConnectionClosedError(str(exc))
    else:
        error = SendError("publish failed", exc)
    error.__cause__ = exc
    return error


class ArgumentError(ConfigError, AssertionError, TypeError):
    """A bad argument to the drop-in: a value out of range, a wrong type, an unknown keyword.

    pynsq checks its arguments with ``assert``, so code written against it
    catches ``AssertionError``; gnsqlite raises
    :class:`~gnsqlite.errors.ConfigError` (a ``ValueError``); earlier
    versions of the drop-in raised ``TypeError`` for a wrong type or an
    unknown keyword. This is all three, and its message says what to fix.
    """


class InvalidNameArgumentError(InvalidNameError, AssertionError):
    """An invalid topic or channel name given to the drop-in.

    gnsqlite's :class:`~gnsqlite.errors.InvalidNameError` (a ``ValueError``)
    that is also the ``AssertionError`` pynsq raises.
    """


@contextlib.contextmanager
def pynsq_arguments(owner: str) -> Iterator[None]:
    """Re-raise gnsqlite's argument errors inside the block as :class:`ArgumentError`.

    ``owner`` (``"Reader"``, ``"pub"`` ...) starts the message; the original
    error is the ``__cause__``.
    """
    try:
        yield
    except (AssertionError, ServerError, NSQConnectionError, MessageTooLargeError):
        raise
    except InvalidNameError as exc:
        raise InvalidNameArgumentError(f"{owner}: {exc}") from exc
    except (NSQError, TypeError, ValueError) as exc:
        raise ArgumentError(f"{owner}: {exc}") from exc
