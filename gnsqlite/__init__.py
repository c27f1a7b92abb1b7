"""gnsqlite: a gevent-native client for the NSQ message queue.

The protocol core (:mod:`gnsqlite.protocol`) is pure and importable without
starting anything. Importing this package never monkey-patches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._version import __version__
from .config import ConnectionConfig, ConsumerConfig, ProducerConfig
from .errors import (
    ConfigError,
    InvalidNameError,
    NSQConnectionError,
    NSQError,
    NSQTimeoutError,
    ServerError,
)

if TYPE_CHECKING:
    from .consumer import Consumer
    from .message import Message, RequeueMessage
    from .producer import Producer

_LAZY = {
    "Consumer": "consumer",
    "Producer": "producer",
    "Message": "message",
    "RequeueMessage": "message",
}


def __getattr__(name: str) -> object:
    """Import the gevent-based classes on first use, so ``import gnsqlite`` stays light."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gnsqlite' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{module}", __name__), name)


__all__ = [
    "__version__",
    "Consumer",
    "Producer",
    "Message",
    "RequeueMessage",
    "ConnectionConfig",
    "ConsumerConfig",
    "ProducerConfig",
    "ConfigError",
    "InvalidNameError",
    "NSQConnectionError",
    "NSQError",
    "NSQTimeoutError",
    "ServerError",
]
