"""A producer's size rules, and the MPUB built with them checked.

The limits are a :class:`~gnsqlite.config.ProducerConfig`'s
``max_message_size`` and ``max_body_size`` (nsqd's ``--max-msg-size`` and
``--max-body-size``). A body too large raises
:class:`~gnsqlite.errors.MessageTooLargeError`, an empty one
:class:`~gnsqlite.errors.LocalProtocolError` (nsqd refuses it too), each
saying what to change. Nothing here blocks or sends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..config import ProducerConfig
from ..errors import LocalProtocolError, MessageTooLargeError
from ..protocol import commands

__all__ = ["check_body_size", "check_message_size", "mpub_data"]


def check_message_size(size: int, limits: ProducerConfig) -> None:
    """Raise the error that says why a message body of ``size`` bytes cannot be sent, if so."""
    if size == 0:
        raise LocalProtocolError("a message body cannot be empty: nsqd refuses it")
    if size > limits.max_message_size:
        raise MessageTooLargeError(
            f"a message of {size} bytes exceeds max_message_size={limits.max_message_size}"
            " (nsqd's --max-msg-size)"
        )


def check_body_size(size: int, limits: ProducerConfig, what: str = "") -> None:
    """Raise when an MPUB body of ``size`` bytes exceeds ``max_body_size``.

    ``what`` says more about the body in the message (``" (3 messages)"``).
    """
    if size > limits.max_body_size:
        raise MessageTooLargeError(
            f"an MPUB body of {size} bytes{what} exceeds max_body_size={limits.max_body_size}"
            " (nsqd's --max-body-size); split the batch"
        )


def mpub_data(
    topic: str, bodies: Sequence[Any], limits: ProducerConfig, careful: bool
) -> bytes | None:
    """The whole MPUB of ``bodies`` (sizes checked against ``limits``), in one join.

    ``careful``: ``bodies`` are all ``bytes``, and a broken limit raises the
    error that says why. Otherwise ``None`` for anything but buffers of
    bytes within the limits (a ``str`` or ``None`` among them, a
    ``memoryview`` whose ``len`` is not its size, a body too large ...).
    An empty ``bodies`` raises :class:`~gnsqlite.errors.LocalProtocolError`.
    """
    try:
        sizes = list(map(len, bodies))  # one pass; usually one size
    except TypeError:  # a body without a len: the careful path names it
        return None
    count = len(sizes)
    if not count:
        raise LocalProtocolError("multi_publish needs at least one message")
    size = sizes[0] if sizes.count(sizes[0]) == count else None  # the one size, if so
    smallest, largest = (size, size) if size is not None else (min(sizes), max(sizes))
    if smallest == 0 or largest > limits.max_message_size:
        if not careful:
            return None
        check_message_size(smallest, limits)  # raises the error that says why
        check_message_size(largest, limits)
    total = commands.mpub_body_size(bodies, size)
    if total > limits.max_body_size:
        if not careful:
            return None
        check_body_size(total, limits, f" ({count} messages)")
    try:
        data = commands.mpub_command(topic, bodies, size)
    except TypeError:  # not a buffer (a str ...): never so when careful
        return None
    # "MPUB <topic>\n", the 4-byte size, the body: a buffer whose len() is
    # not its byte count (a memoryview of wider items) breaks the sum.
    return data if careful or len(data) == len(topic) + 10 + total else None
