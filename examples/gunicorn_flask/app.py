"""A Flask app under gunicorn's gevent worker that publishes to and consumes from NSQ.

Each worker process gets, after the fork, its own Consumer (handlers run in
greenlets next to the requests) and one Producer shared by every request
of the worker. ``gunicorn.conf.py`` wires the hooks::

    NSQD_TCP_ADDRESS=127.0.0.1:4150 gunicorn -c examples/gunicorn_flask/gunicorn.conf.py \\
        --chdir examples/gunicorn_flask app:app

Endpoints:

* ``POST /publish[?topic=name]``: publishes to ``topic`` (default ``NSQ_TOPIC``).
  A JSON body (``Content-Type: application/json``) must be
  ``{"messages": ["a", "b"]}`` and is published with one MPUB: all or none;
  any other body is one message. Answers ``{"published": n}``, or, when
  nothing was published, ``{"published": 0, "error": reason}`` with status
  400 (bad input: empty body, invalid topic or JSON, a message above nsqd's
  size limit), 503 and a ``Retry-After`` header (no nsqd took it in time),
  or 502 (nsqd refused it for another reason). Only a publish that nsqd did
  not confirm in time answers 503 with ``"published": null``: it may have
  reached nsqd, so a retry can duplicate it.
* ``GET /stats``: the worker's pid, how many messages it handled, and the
  Consumer's ``stats()``.
* ``GET /metrics``: Prometheus metrics of every worker's Consumer and
  Producer, summed over the workers (prometheus_client's multiprocess mode:
  ``gunicorn.conf.py`` sets ``PROMETHEUS_MULTIPROC_DIR``). Needs
  ``gnsqlite[metrics]``.
* ``GET /healthz``: 200 when this worker's Consumer and Producer are
  connected, else 503; the body is both ``health()`` reports with the
  reasons.

Settings come from the environment: ``NSQD_TCP_ADDRESS`` (default
``127.0.0.1:4150``), ``NSQ_TOPIC`` (``events``), ``NSQ_CHANNEL`` (``web``),
``NSQ_MAX_IN_FLIGHT`` (``20``), ``NSQ_PUBLISH_TIMEOUT`` (``5`` seconds) and
``RECORD_DIR``: when set, each worker appends the body of every message it
handles to ``RECORD_DIR/<pid>.log``. ``check_settings()`` validates them;
gunicorn calls it once, before starting any worker.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from typing import Any

from flask import Flask, Request, Response, jsonify, request
from werkzeug.exceptions import BadRequest

from gnsqlite.consumer import Consumer
from gnsqlite.errors import (
    BadBodyError,
    BadMessageError,
    BadTopicError,
    ConfigError,
    LocalProtocolError,
    MPubFailedError,
    NSQConnectionError,
    NSQError,
    NSQTimeoutError,
    PubFailedError,
)
from gnsqlite.message import Message
from gnsqlite.metrics import Instrumentation, exposition, instrument
from gnsqlite.producer import Producer

log = logging.getLogger(__name__)

app = Flask(__name__)

#: Errors of the request: nothing was sent, or nsqd refused it as malformed.
BAD_INPUT = (
    BadRequest,
    ValueError,
    LocalProtocolError,
    BadTopicError,
    BadBodyError,
    BadMessageError,
)
#: Errors that pass: no nsqd reachable, or nsqd could not store the messages.
TRY_LATER = (NSQConnectionError, NSQTimeoutError, PubFailedError, MPubFailedError)
RETRY_AFTER_SECONDS = 1


#: The settings, read from the environment: name -> (default, what it is).
#: ``python app.py --help`` prints them.
SETTINGS: dict[str, tuple[str | None, str]] = {
    "NSQD_TCP_ADDRESS": ("127.0.0.1:4150", "nsqd TCP address host:port"),
    "NSQ_TOPIC": ("events", "the topic consumed, and published to by default"),
    "NSQ_CHANNEL": ("web", "the channel each worker's Consumer reads"),
    "NSQ_MAX_IN_FLIGHT": ("20", "messages in flight at once, per worker"),
    "NSQ_PUBLISH_TIMEOUT": ("5", "seconds a publish may take before it answers 503"),
    "RECORD_DIR": (
        None,
        "a directory: each worker appends the bodies it handles to"
        " RECORD_DIR/<pid>.log (default: none)",
    ),
    "BIND": ("127.0.0.1:8000", "where gunicorn listens (gunicorn.conf.py)"),
    "PROMETHEUS_MULTIPROC_DIR": (
        None,
        "where the workers' metrics go (default: a fresh temporary directory, gunicorn.conf.py)",
    ),
}


def setting(name: str) -> str | None:
    """The value of setting ``name``: the environment's, else its default."""
    return os.environ.get(name, SETTINGS[name][0])


def _number(name: str, kind: type[int] | type[float]) -> Any:
    value = setting(name)
    try:
        return kind(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not a number") from None


class Worker:
    """The NSQ clients of one gunicorn worker process."""

    def __init__(self) -> None:
        self.handled = 0
        self.topic = ""
        self.producer: Producer | None = None
        self.consumer: Consumer | None = None
        self.metrics: list[Instrumentation] = []
        self._record: Any = None

    def build(self) -> tuple[Producer, Consumer]:
        """Read the settings and build the clients (opens nothing); raises ``NSQError`` if bad."""
        address = str(setting("NSQD_TCP_ADDRESS"))
        producer = Producer([address], timeout=_number("NSQ_PUBLISH_TIMEOUT", float))
        consumer = Consumer(
            str(setting("NSQ_TOPIC")),
            str(setting("NSQ_CHANNEL")),
            self.handle,
            nsqd_tcp_addresses=[address],
            max_in_flight=_number("NSQ_MAX_IN_FLIGHT", int),
        )
        return producer, consumer

    def start(self) -> None:
        """Connect the Producer and start the Consumer (called after the fork)."""
        self.producer, self.consumer = self.build()
        self.topic = self.consumer.topic
        record_dir = setting("RECORD_DIR")
        if record_dir:
            path = os.path.join(record_dir, f"{os.getpid()}.log")
            self._record = open(path, "ab", buffering=0)  # noqa: SIM115 - closed in stop()
        # Exported at /metrics; in multiprocess mode synced to the shared directory every second.
        self.metrics = [instrument(self.producer), instrument(self.consumer)]
        self.producer.start()
        self.consumer.start()
        log.info("worker %d: consuming %s/%s", os.getpid(), self.topic, self.consumer.channel)

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
        for instrumentation in self.metrics:
            instrumentation.close()  # the last counts reach the shared directory
        if self._record is not None:
            self._record.close()
        log.info("worker %d: closed after handling %d messages", os.getpid(), self.handled)


worker = Worker()


def check_settings() -> str | None:
    """The problem with the settings, in one line, or ``None`` when they are usable."""
    try:
        worker.build()
    except NSQError as exc:
        return f"bad NSQ setting in the environment: {exc}"
    return None


def messages_of(req: Request) -> list[str] | list[bytes]:
    """The messages a request asks to publish; raises ``BadRequest`` saying what is wrong."""
    if not req.is_json:
        return [req.get_data()]
    try:
        data = json.loads(req.get_data())
    except ValueError as exc:
        raise BadRequest(f"invalid JSON: {exc}") from None
    messages = data.get("messages") if isinstance(data, dict) else None
    if not isinstance(messages, list) or not all(isinstance(m, str) for m in messages):
        raise BadRequest('a JSON body must be {"messages": [...]}, a list of strings')
    return messages


@app.post("/publish")
def publish() -> Any:
    """Publish the request's messages, all or none; blocks until nsqd answers."""
    if worker.producer is None:
        return jsonify({"error": "no producer: run under gunicorn -c gunicorn.conf.py"}), 503
    topic = request.args.get("topic", worker.topic)
    messages = messages_of(request)
    if request.is_json:
        worker.producer.multi_publish(topic, messages)
    else:
        worker.producer.publish(topic, messages[0])
    return jsonify({"published": len(messages), "worker": os.getpid()})


@app.errorhandler(BadRequest)
@app.errorhandler(NSQError)
def refuse(error: Exception) -> Any:
    """The answer to a request that published nothing: a status and the reason."""
    reason = error.description if isinstance(error, BadRequest) else str(error)
    published: int | None = 0
    headers = {}
    if isinstance(error, BAD_INPUT):
        status = 400
    elif isinstance(error, TRY_LATER):
        status, headers = 503, {"Retry-After": str(RETRY_AFTER_SECONDS)}
        if isinstance(error, NSQTimeoutError):
            published = None  # sent, but not confirmed: it may have been published
    else:  # nsqd refused it (E_UNAUTHORIZED ...): not the caller's fault, not passing
        status = 502
    log.info("publish refused (%d): %s", status, reason)
    return jsonify({"published": published, "error": reason}), status, headers


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


@app.get("/metrics")
def metrics() -> Any:
    """Prometheus metrics, summed over every worker in multiprocess mode."""
    body, content_type = exposition()
    return Response(body, content_type=content_type)


@app.get("/healthz")
def healthz() -> Any:
    """200 when this worker's Consumer and Producer are connected, else 503 with the reasons."""
    if worker.consumer is None or worker.producer is None:
        return jsonify({"ok": False, "reasons": ["no NSQ clients: run under gunicorn"]}), 503
    consumer, producer = worker.consumer.health(), worker.producer.health()
    ok = consumer.ok and producer.ok
    body = {
        "ok": ok,
        "worker": os.getpid(),
        "consumer": consumer.as_dict(),
        "producer": producer.as_dict(),
    }
    return jsonify(body), 200 if ok else 503


def build_parser() -> argparse.ArgumentParser:
    """``python app.py --help``: how to run the app, and every setting with its default."""
    lines = [
        f"  {name:<26}{text}" + ("" if default is None else f" (default {default})")
        for name, (default, text) in SETTINGS.items()
    ]
    return argparse.ArgumentParser(
        prog="app.py",
        description="A Flask app under gunicorn's gevent worker that publishes to and"
        " consumes from NSQ. Run it with gunicorn (see README.md):\n\n"
        "  NSQD_TCP_ADDRESS=127.0.0.1:4150 gunicorn -c examples/gunicorn_flask/gunicorn.conf.py"
        " --chdir examples/gunicorn_flask app:app",
        epilog="settings (environment variables):\n" + "\n".join(lines),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


if __name__ == "__main__":
    build_parser().parse_args()
    raise SystemExit("app.py: error: run it under gunicorn (see --help)")
