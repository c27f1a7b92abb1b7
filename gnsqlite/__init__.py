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
from .protocol import frames as _frames


def _compiled() -> bool:
    """Whether the modules running are the compiled build's (setup.py): the frame
    decoder, compiled first of all, is then an extension module."""
    from importlib.machinery import EXTENSION_SUFFIXES

    return (getattr(_frames, "__file__", None) or "").endswith(tuple(EXTENSION_SUFFIXES))


#: True when the mypyc-compiled modules are the ones running (``GNSQLITE_COMPILE=1``
#: at build time, see docs/getting-started.md), False for the pure-Python package.
compiled: bool = _compiled()

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
    "compiled",
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
