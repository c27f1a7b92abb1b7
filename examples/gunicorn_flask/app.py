"""A Flask app under gunicorn's gevent worker that publishes to and consumes from NSQ.

Each worker process gets, after the fork, its own Consumer (handlers run in
greenlets next to the requests) and one Producer shared by every request
of the worker. ``gunicorn.conf.py`` wires the hooks::

    NSQD_TCP_ADDRESS=127.0.0.1:4150 gunicorn -c examples/gunicorn_flask/gunicorn.conf.py \\
        --chdir examples/gunicorn_flask app:app

Endpoints:

* ``POST /publish``: the request body is one message; a JSON body
  ``{"messages": ["a", "b"]}`` publishes them with one MPUB.
* ``GET /stats``: the worker's pid, how many messages it handled, and the
  Consumer's ``stats()``.

Settings come from the environment: ``NSQD_TCP_ADDRESS`` (default
``127.0.0.1:4150``), ``NSQ_TOPIC`` (``events``), ``NSQ_CHANNEL`` (``web``),
``NSQ_MAX_IN_FLIGHT`` (``20``) and ``RECORD_DIR``: when set, each worker
appends the body of every message it handles to ``RECORD_DIR/<pid>.log``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from flask import Flask, jsonify, request

from gnsqlite.consumer import Consumer
from gnsqlite.message import Message
from gnsqlite.producer import Producer

log = logging.getLogger(__name__)

app = Flask(__name__)


class Worker:
    """The NSQ clients of one gunicorn worker process."""

    def __init__(self) -> None:
        self.address = os.environ.get("NSQD_TCP_ADDRESS", "127.0.0.1:4150")
        self.topic = os.environ.get("NSQ_TOPIC", "events")
        self.channel = os.environ.get("NSQ_CHANNEL", "web")
        self.max_in_flight = int(os.environ.get("NSQ_MAX_IN_FLIGHT", "20"))
        self.record_dir = os.environ.get("RECORD_DIR")
        self.handled = 0
        self.producer: Producer | None = None
        self.consumer: Consumer | None = None
        self._record: Any = None

    def start(self) -> None:
        """Connect the Producer and start the Consumer (called after the fork)."""
        if self.record_dir:
            path = os.path.join(self.record_dir, f"{os.getpid()}.log")
            self._record = open(path, "ab", buffering=0)  # noqa: SIM115 - closed in stop()
        self.producer = Producer([self.address])
        self.producer.start()
        self.consumer = Consumer(
            self.topic,
            self.channel,
            self.handle,
            nsqd_tcp_addresses=[self.address],
            max_in_flight=self.max_in_flight,
        )
        self.consumer.start()
        log.info("worker %d: consuming %s/%s", os.getpid(), self.topic, self.channel)

    def handle(self, message: Message) -> None:
        """Handle one message: here, record it. Returning finishes it."""
        if self._record is not None:
            self._record.write(message.body + b"\n")
        self.handled += 1

    def stop(self) -> None:
        """Drain the Consumer, then close the Producer (called when the worker exits)."""
        if self.consumer is not None:
            self.consumer.close(timeout=10.0)
        if self.producer is not None:
            self.producer.close()
        if self._record is not None:
            self._record.close()
        log.info("worker %d: closed after handling %d messages", os.getpid(), self.handled)


worker = Worker()


@app.post("/publish")
def publish() -> Any:
    """Publish the request body (or a JSON list of messages); blocks until nsqd answers."""
    if worker.producer is None:
        return jsonify({"error": "no producer: run under gunicorn -c gunicorn.conf.py"}), 503
    data = request.get_json(silent=True)
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        worker.producer.multi_publish(worker.topic, [str(m) for m in data["messages"]])
        count = len(data["messages"])
    else:
        worker.producer.publish(worker.topic, request.get_data())
        count = 1
    return jsonify({"published": count, "worker": os.getpid()})


@app.get("/stats")
def stats() -> Any:
    """The worker's counters and its Consumer's stats."""
    consumer = worker.consumer
    return jsonify(
        {
            "worker": os.getpid(),
            "handled": worker.handled,
            "consumer": consumer.stats() if consumer is not None else None,
        }
    )
