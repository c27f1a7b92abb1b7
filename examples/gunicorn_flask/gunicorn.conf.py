"""gunicorn settings for the example: two gevent workers, NSQ clients per worker.

The Consumer and Producer are built in ``post_worker_init``: after the fork
and after the gevent worker patched the process, so each worker has its own
connections and its own greenlets. ``worker_exit`` closes them when gunicorn
stops the worker (SIGTERM to the master): the Consumer drains (handlers
finish, the rest is requeued) before the Producer closes.
"""

from __future__ import annotations

import os
from typing import Any

bind = os.environ.get("BIND", "127.0.0.1:8000")
workers = 2
worker_class = "gevent"
graceful_timeout = 20


def post_worker_init(worker: Any) -> None:
    from app import worker as nsq_worker

    nsq_worker.start()


def worker_exit(server: Any, worker: Any) -> None:
    from app import worker as nsq_worker

    nsq_worker.stop()
