"""Topic and channel name rules.

A valid name is 1 to 64 characters from ``[.a-zA-Z0-9_-]``, the length
counting an optional ``#ephemeral`` suffix. The ``check_*`` functions raise
:class:`~gnsqlite.errors.InvalidNameError` with a message naming the rule that
was broken; the ``valid_*`` functions answer ``True`` or ``False``.
"""

from __future__ import annotations

import re

from ..errors import InvalidNameError

__all__ = [
    "MAX_NAME_LENGTH",
    "EPHEMERAL_SUFFIX",
    "check_topic_name",
    "check_channel_name",
    "valid_topic_name",
    "valid_channel_name",
    "is_ephemeral",
]

MAX_NAME_LENGTH = 64
EPHEMERAL_SUFFIX = "#ephemeral"
_ALLOWED = "[.a-zA-Z0-9_-]"
# fullmatch, not match with "$": "$" also matches before a trailing newline,
# and "abc\n" would then pass and break the command's framing on the wire.
_VALID = re.compile(r"[.a-zA-Z0-9_-]+(?:#ephemeral)?")
_BAD_CHAR = re.compile(r"[^.a-zA-Z0-9_-]")


def _problem(name: object) -> str | None:
    """Say what is wrong with ``name``, or return ``None`` when it is valid."""
    if isinstance(name, bytes):
        try:
            name = name.decode("ascii")
        except UnicodeDecodeError:
            return "is not ASCII"
    if not isinstance(name, str):
        return f"must be a str, not {type(name).__name__}"
    if not name:
        return "is empty; a name has 1 to 64 characters"
    if len(name) > MAX_NAME_LENGTH:
        return (
            f"is {len(name)} characters long; the limit is {MAX_NAME_LENGTH},"
            f" counting any {EPHEMERAL_SUFFIX!r} suffix"
        )
    if _VALID.fullmatch(name):
        return None
    stem = name[: -len(EPHEMERAL_SUFFIX)] if name.endswith(EPHEMERAL_SUFFIX) else name
    if not stem:
        return f"has nothing before the {EPHEMERAL_SUFFIX!r} suffix"
    bad = sorted(set(_BAD_CHAR.findall(stem)))
    shown = ", ".join(repr(c) for c in bad)
    return (
        f"contains {shown}; only characters from {_ALLOWED} are allowed,"
        f" optionally followed by {EPHEMERAL_SUFFIX!r}"
    )


#: Valid ``str`` names seen so far (bounded): a publisher names the same topic
#: on every call, and the rules need not run again for it.
_KNOWN_VALID: set[str] = set()
_KNOWN_VALID_LIMIT = 4096


def _check(kind: str, name: str | bytes) -> str:
    if type(name) is str and name in _KNOWN_VALID:
        return name
    problem = _problem(name)
    if problem is not None:
        raise InvalidNameError(f"{kind} name {name!r} {problem}")
    if isinstance(name, bytes):
        return name.decode("ascii")
    if len(_KNOWN_VALID) < _KNOWN_VALID_LIMIT:
        _KNOWN_VALID.add(name)
    return name


def check_topic_name(name: str | bytes) -> str:
    """Return ``name`` as ``str`` if it is a valid topic name, else raise
    :class:`InvalidNameError` saying which rule it breaks."""
    if name in _KNOWN_VALID:  # _check's first test, inlined (a bytes name is never in it)
        return name
    return _check("topic", name)


def check_channel_name(name: str | bytes) -> str:
    """Return ``name`` as ``str`` if it is a valid channel name, else raise
    :class:`InvalidNameError` saying which rule it breaks."""
    return _check("channel", name)


def valid_topic_name(name: str | bytes) -> bool:
    """``True`` when ``name`` is a valid topic name."""
    return _problem(name) is None


def valid_channel_name(name: str | bytes) -> bool:
    """``True`` when ``name`` is a valid channel name."""
    return _problem(name) is None


def is_ephemeral(name: str) -> bool:
    """``True`` when ``name`` carries the ``#ephemeral`` suffix."""
    return name.endswith(EPHEMERAL_SUFFIX)
