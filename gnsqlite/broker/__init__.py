"""The embedded nsqd-compatible broker (and, in :mod:`.lookupd`, nsqlookupd).

>>> from gnsqlite.broker import Broker
>>> broker = Broker(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0")

:meth:`Broker.start` binds and serves without blocking; ``broker.tcp_address``
and ``broker.http_address`` then hold the bound ``"host:port"``. Run it from
a shell with ``python -m gnsqlite.broker`` and nsqd's flags.
"""

from __future__ import annotations

from .nsqd import NSQD_VERSION, Broker, Listener
from .options import BrokerOptions, parse_duration

__all__ = ["Broker", "BrokerOptions", "Listener", "NSQD_VERSION", "parse_duration"]
