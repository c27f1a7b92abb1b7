"""A live dashboard for NSQ consumers, producers and clusters, in the browser.

::

    from gnsqlite.dashboard import Dashboard

    dashboard = Dashboard(consumer, producer)          # in-process objects
    dashboard.start(("127.0.0.1", 8080))               # returns at once
    print(dashboard.url)

    Dashboard(lookupd_http_addresses=["127.0.0.1:4161"]).start()   # a cluster, over HTTP

Rates (received, finished, requeued), in-flight and RDY per connection,
backoff and starvation, connection events and a tail of recent message
bodies, pushed over a websocket. Read-only, bound to 127.0.0.1 by default,
every file served from the package. Needs ``pip install gnsqlite[dashboard]``.
"""

from __future__ import annotations

from .server import Dashboard
from .sources import ConsumerSource, HTTPSource, ProducerSource

__all__ = ["ConsumerSource", "Dashboard", "HTTPSource", "ProducerSource"]
