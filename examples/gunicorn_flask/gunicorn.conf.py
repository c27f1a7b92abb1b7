"""gunicorn settings for the example: two gevent workers, NSQ clients per worker.

``on_starting`` checks the NSQ settings once, in the master: a bad one
stops gunicorn with one line on stderr (exit status 1) before any worker
starts. The Consumer and Producer are built in ``post_worker_init``: after
the fork and after the gevent worker patched the process, so each worker has
its own connections and its own greenlets. ``worker_exit`` closes them when
gunicorn stops the worker (SIGTERM to the master): the Consumer drains
(handlers finish, the rest is requeued) before the Producer closes.

Metrics: every worker writes its metrics to ``PROMETHEUS_MULTIPROC_DIR``
(prometheus_client's multiprocess mode), so ``/metrics``, whichever worker
answers, sums them all. The variable must be set before prometheus_client is
first imported: this file sets it (a fresh temporary directory, removed on
exit) unless the environment already does; ``on_starting`` empties it (files
of an earlier run would be counted again) and ``child_exit`` drops a dead
worker's live gauges.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

bind = os.environ.get("BIND", "127.0.0.1:8000")  # app.SETTINGS lists every setting
workers = 2
worker_class = "gevent"
graceful_timeout = 20

if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
    _own_metrics_dir = tempfile.mkdtemp(prefix="gunicorn_flask_metrics_")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = _own_metrics_dir
else:
    _own_metrics_dir = None


def on_starting(server: Any) -> None:
    metrics_dir = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    metrics_dir.mkdir(parents=True, exist_ok=True)
    for stale in metrics_dir.glob("*.db"):
        stale.unlink()
    from app import check_settings

    problem = check_settings()
    if problem is not None:
        on_exit(server)
        sys.exit(f"gunicorn_flask: {problem}")


def post_worker_init(worker: Any) -> None:
    from app import worker as nsq_worker

    nsq_worker.start()
    worker.log.info("worker %d: NSQ clients started", worker.pid)


def worker_exit(server: Any, worker: Any) -> None:
    from app import worker as nsq_worker

    nsq_worker.stop()


def child_exit(server: Any, worker: Any) -> None:
    from gnsqlite.metrics import mark_process_dead

    mark_process_dead(worker.pid)


def on_exit(server: Any) -> None:
    if _own_metrics_dir is not None:
        shutil.rmtree(_own_metrics_dir, ignore_errors=True)
