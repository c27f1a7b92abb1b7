"""The embedded nsqd-compatible broker (and, in :mod:`.lookupd`, nsqlookupd).

>>> from gnsqlite.broker import Broker
>>> broker = Broker(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0")

:meth:`Broker.start` binds and serves without blocking; ``broker.tcp_address``
and ``broker.http_address`` then hold the bound ``"host:port"``. Run it from
a shell with ``python -m gnsqlite.broker`` and nsqd's flags.

Layers, each importing only those below it (``tests/unit/test_layering.py``
fails on any import circle): the state (:mod:`.options`, :mod:`.queues`,
:mod:`.persist`, :mod:`.state`; for nsqlookupd :mod:`.lookupd_db`); the front
ends serving it (the TCP protocol :mod:`.client`, :mod:`.stats`,
:mod:`.http_api`; :mod:`.lookupd_tcp`, :mod:`.lookupd_http`); the servers that
open the listeners (:mod:`.nsqd`, :mod:`.lookupd`).
"""

from __future__ import annotations

from .nsqd import NSQD_VERSION, Broker, Listener
from .options import BrokerOptions, parse_duration

__all__ = ["Broker", "BrokerOptions", "Listener", "NSQD_VERSION", "parse_duration"]
