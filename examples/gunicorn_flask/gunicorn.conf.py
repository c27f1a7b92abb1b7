"""gunicorn settings for the example: two gevent workers, NSQ clients per worker.

``on_starting`` checks the NSQ settings once, in the master: a bad one
stops gunicorn with one line on stderr (exit status 1) before any worker
starts. The Consumer and Producer are built in ``post_worker_init``: after
the fork and after the gevent worker patched the process, so each worker has
its own connections and its own greenlets. ``worker_exit`` closes them when
gunicorn stops the worker (SIGTERM to the master): the Consumer drains
(handlers finish, the rest is requeued) before the Producer closes.
"""

from __future__ import annotations

import os
import sys
from typing import Any

bind = os.environ.get("BIND", "127.0.0.1:8000")
workers = 2
worker_class = "gevent"
graceful_timeout = 20


def on_starting(server: Any) -> None:
    from app import check_settings

    problem = check_settings()
    if problem is not None:
        sys.exit(f"gunicorn_flask: {problem}")


def post_worker_init(worker: Any) -> None:
    from app import worker as nsq_worker

    nsq_worker.start()
    worker.log.info("worker %d: NSQ clients started", worker.pid)


def worker_exit(server: Any, worker: Any) -> None:
    from app import worker as nsq_worker

    nsq_worker.stop()
