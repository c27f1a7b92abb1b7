"""pynsq's ``LegacyReader``: one Reader per task of a pre-0.5 ``all_tasks`` dict.

Deprecated in pynsq too: build one :class:`~gnsqlite.nsq.Reader` per handler.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from .errors import ArgumentError
from .reader import Reader

__all__ = ["LegacyReader"]

#: The order of the positional arguments pynsq's LegacyReader reads.
_POSITIONAL = ("all_tasks", "topic", "channel")


class LegacyReader:
    """``readers``: one Reader per entry of ``all_tasks`` (name -> handler).

    With several tasks, each reads the channel ``"<channel>.<task>"``; the
    other keywords go to every Reader.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        warnings.warn(
            "LegacyReader is deprecated (as in pynsq): use one Reader per message handler",
            DeprecationWarning,
            stacklevel=2,
        )
        params = dict(zip(_POSITIONAL, args, strict=False))
        params.update(kwargs)
        missing = [name for name in _POSITIONAL if name not in params]
        if missing:
            raise ArgumentError(f"LegacyReader: missing {', '.join(missing)}")
        all_tasks: dict[str, Callable[..., Any]] = params.pop("all_tasks")
        topic, channel = params.pop("topic"), params.pop("channel")
        if not isinstance(all_tasks, dict) or not all(callable(m) for m in all_tasks.values()):
            raise ArgumentError("LegacyReader: all_tasks must map task names to callables")
        self.readers = [
            Reader(
                topic=topic,
                channel=f"{channel}.{task}" if len(all_tasks) > 1 else channel,
                message_handler=handler,
                **params,
            )
            for task, handler in all_tasks.items()
        ]
