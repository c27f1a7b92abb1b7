"""gnsqlite: a gevent-native client for the NSQ message queue.

The protocol core (:mod:`gnsqlite.protocol`) is pure and importable without
starting anything. Importing this package never monkey-patches.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .config import ConnectionConfig, ConsumerConfig
from .errors import (
    ConfigError,
    InvalidNameError,
    NSQConnectionError,
    NSQError,
    NSQTimeoutError,
    ServerError,
)

__all__ = [
    "__version__",
    "ConnectionConfig",
    "ConsumerConfig",
    "ConfigError",
    "InvalidNameError",
    "NSQConnectionError",
    "NSQError",
    "NSQTimeoutError",
    "ServerError",
]
