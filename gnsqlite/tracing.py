"""OpenTelemetry tracing across the queue (the ``tracing`` extra).

::

    from gnsqlite.tracing import TracedProducer, trace_consumer

    producer = TracedProducer(Producer(["127.0.0.1:4150"]))   # a PRODUCER span per publish
    consumer = Consumer("urls", "fetch", fetch, nsqd_tcp_addresses=["127.0.0.1:4150"])
    trace_consumer(consumer)                                  # a CONSUMER span per handled message

Spans follow OpenTelemetry's messaging conventions (``docs/tracing.md``
lists every attribute): ``messaging.system`` is ``"nsq"`` (the conventions
register no value for NSQ; a custom one is allowed), the destination is the
topic, the consumer group the channel.

* :class:`TracedProducer` wraps a :class:`~gnsqlite.producer.Producer`: each
  ``publish`` (PUB or DPUB) and each ``multi_publish`` (MPUB, one span for
  the batch, with ``messaging.batch.message_count``) is one ``publish
  {topic}`` span of kind PRODUCER, a child of the caller's current span, that
  ends when nsqd answered or the publish failed. Its context is the
  messages' creation context: with ``envelope=True`` (the default) every
  body is published inside a trace envelope (:mod:`gnsqlite.trace_envelope`)
  carrying it as W3C ``traceparent``/``tracestate``.
* :func:`trace_consumer` wraps a Consumer's handler
  (:meth:`~gnsqlite.consumer.Consumer.wrap_handler`): each handler call is a
  ``process {topic}`` span of kind CONSUMER, current while the handler runs
  (so what it publishes is its child). With ``envelope=True`` (the default)
  a body in a trace envelope is taken out of it before the handler sees it;
  a single message's span is then a child of its creation context and links
  to it, a batch's span links to each message's. A body without the
  envelope's magic is handed over untouched; one with the magic that does
  not parse is handed over unchanged and counted
  (:attr:`ConsumerTracing.envelope_counts`, the metric
  ``gnsqlite_consumer_envelopes_total{outcome="invalid"}``).

A consumer that is not traced (or traced with ``envelope=False``) gets the
bytes as published, envelope included. Span processors run where a span
ends: in the worker greenlet for a handler's span, in the greenlet that read
nsqd's answer for an async publish; use a ``BatchSpanProcessor`` (it exports
in the background), not an exporter that blocks.

Without the extra installed nothing in gnsqlite imports OpenTelemetry; this
module raises ``ImportError`` saying which extra to install.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "gnsqlite.tracing needs opentelemetry-api: pip install 'gnsqlite[tracing]'"
    ) from exc

import gevent.event

from ._version import __version__
from .consumer import Consumer
from .errors import EnvelopeError
from .health import Health
from .message import Message, RequeueMessage
from .producer import Producer
from .protocol import as_body
from .protocol.commands import Body
from .trace_envelope import open_envelope, seal_envelope

__all__ = ["ConsumerTracing", "TracedProducer", "trace_consumer", "MESSAGING_SYSTEM"]

log = logging.getLogger(__name__)

#: ``messaging.system`` of every span (no registered value exists for NSQ).
MESSAGING_SYSTEM = "nsq"
_INSTRUMENTATION = "gnsqlite.tracing"
_PROPAGATOR = TraceContextTextMapPropagator()


def _tracer(tracer_provider: trace.TracerProvider | None) -> trace.Tracer:
    return trace.get_tracer(_INSTRUMENTATION, __version__, tracer_provider=tracer_provider)


def _failed(span: trace.Span, error: BaseException) -> None:
    """Mark ``span`` as failed by ``error`` (the conventions' ``error.type``: its class)."""
    span.set_attribute("error.type", type(error).__qualname__)
    span.record_exception(error)
    span.set_status(trace.Status(trace.StatusCode.ERROR, str(error) or type(error).__name__))


# -- the consumer side -----------------------------------------------------------


class ConsumerTracing:
    """A consumer's handler wrapper: a PROCESS span per handler call; see the module docstring.

    Built by :func:`trace_consumer`. ``envelope_counts`` counts the bodies
    seen with ``envelope=True``: ``opened`` (an envelope, taken out),
    ``plain`` (no envelope, handed over untouched) and ``invalid`` (the
    envelope's magic but not parseable: handed over unchanged).
    """

    def __init__(
        self,
        topic: str,
        channel: str,
        tracer: trace.Tracer,
        envelope: bool,
    ) -> None:
        self.topic = topic
        self.channel = channel
        self.envelope = envelope
        self._tracer = tracer
        self._name = f"process {topic}"
        self._attributes: dict[str, Any] = {
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": topic,
            "messaging.consumer.group.name": channel,
        }
        #: Bodies seen with ``envelope=True``, by outcome (cumulative).
        self.envelope_counts = {"opened": 0, "plain": 0, "invalid": 0}

    def __repr__(self) -> str:
        return f"<ConsumerTracing {self.topic}/{self.channel} envelope={self.envelope}>"

    def __call__(self, handler: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``handler`` wrapped: what :meth:`Consumer.wrap_handler` calls."""

        def traced(arg: Any) -> Any:
            if type(arg) is list:  # a batch_handler's messages
                return self.process_batch(handler, arg)
            return self.process(handler, arg)

        return traced

    def open(self, message: Message) -> trace.SpanContext | None:
        """Take ``message``'s body out of its envelope; its creation context, or ``None``.

        ``None`` when ``envelope`` is off, the body has no envelope, the
        envelope does not parse (counted ``invalid``; the body is left as it
        is) or carries no valid trace context.
        """
        if not self.envelope:
            return None
        try:
            opened = open_envelope(message.body)
        except EnvelopeError as exc:
            self.envelope_counts["invalid"] += 1
            log.debug("%r: message %s handed over unchanged: %s", self, message.id, exc)
            return None
        if opened is None:
            self.envelope_counts["plain"] += 1
            return None
        self.envelope_counts["opened"] += 1
        message.body = opened.body
        carrier = {"traceparent": opened.traceparent}
        if opened.tracestate:
            carrier["tracestate"] = opened.tracestate
        found = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
        return found if found.is_valid else None

    def _message_attributes(self, message: Message) -> dict[str, Any]:
        """The per-message attributes: id, attempts, body size, the nsqd it came from."""
        host, _, port = message.nsqd.rpartition(":")
        attributes: dict[str, Any] = {
            "messaging.message.id": message.id,
            "messaging.nsq.message.attempts": message.attempts,
            "messaging.message.body.size": len(message.body),
        }
        if host and port.isdigit():
            attributes["server.address"] = host
            attributes["server.port"] = int(port)
        return attributes

    def process(self, handler: Callable[[Message], Any], message: Message) -> Any:
        """Run ``handler(message)`` in its PROCESS span; blocks while the handler runs.

        The span's parent is the message's creation context when its
        envelope carried one (and it links to it), else the current context.
        """
        creation = self.open(message)
        parent = None
        links: Sequence[trace.Link] = ()
        if creation is not None:
            parent = trace.set_span_in_context(trace.NonRecordingSpan(creation))
            links = (trace.Link(creation),)
        attributes = {**self._attributes, **self._message_attributes(message)}
        span = self._tracer.start_span(
            self._name, parent, trace.SpanKind.CONSUMER, attributes, links
        )
        return self._run(span, handler, message)

    def process_batch(
        self, handler: Callable[[list[Message]], Any], messages: list[Message]
    ) -> Any:
        """Run ``handler(messages)`` in one PROCESS span linking to each message's creation
        context (the link carries the message's attributes); blocks while the handler runs."""
        links = []
        for message in messages:
            creation = self.open(message)
            if creation is not None:
                links.append(trace.Link(creation, self._message_attributes(message)))
        attributes = {**self._attributes, "messaging.batch.message_count": len(messages)}
        span = self._tracer.start_span(self._name, None, trace.SpanKind.CONSUMER, attributes, links)
        return self._run(span, handler, messages)

    def _run(self, span: trace.Span, handler: Callable[[Any], Any], arg: Any) -> Any:
        """``handler(arg)`` with ``span`` current, then the span ended; exceptions go through.

        :class:`~gnsqlite.message.RequeueMessage` is an answer, not an error;
        any other exception marks the span failed.
        """
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            return handler(arg)
        except RequeueMessage:
            span.set_attribute("messaging.nsq.requeued", True)
            raise
        except BaseException as exc:
            _failed(span, exc)
            raise
        finally:
            otel_context.detach(token)
            span.end()


def trace_consumer(
    consumer: Consumer,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    envelope: bool = True,
) -> ConsumerTracing:
    """Trace ``consumer``'s handler calls (see the module docstring); returns the wrapper.

    ``tracer_provider`` defaults to OpenTelemetry's global one;
    ``envelope`` takes trace envelopes out of the bodies (off: the handler
    gets the bytes as published). Call it before or after ``start()``; it
    opens nothing and does not block.
    """
    if not isinstance(consumer, Consumer):
        raise TypeError(f"trace_consumer takes a gnsqlite Consumer, not {type(consumer).__name__}")
    tracing = ConsumerTracing(
        consumer.topic, consumer.channel, _tracer(tracer_provider), bool(envelope)
    )
    consumer.wrap_handler(tracing)
    return tracing


# -- the producer side -----------------------------------------------------------


class TracedProducer:
    """A :class:`~gnsqlite.producer.Producer` whose publishes are PRODUCER spans.

    The publishing methods take the arguments of the Producer's and raise
    what it raises; the rest (``start``, ``close``, ``stats`` ...) are the
    producer's (:attr:`producer`). ``envelope`` (default ``True``) publishes
    each body in a trace envelope carrying the span's context; a body then
    grows by 12 bytes plus the traceparent (55) and tracestate, and the
    producer's size limits apply to the envelope. The constructor opens
    nothing.
    """

    def __init__(
        self,
        producer: Producer,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        envelope: bool = True,
    ) -> None:
        if not isinstance(producer, Producer):
            raise TypeError(
                f"TracedProducer wraps a gnsqlite Producer, not {type(producer).__name__}"
            )
        #: The producer that publishes.
        self.producer = producer
        self.envelope = bool(envelope)
        self._tracer = _tracer(tracer_provider)

    def __repr__(self) -> str:
        return f"<TracedProducer {self.producer!r}>"

    # -- the producer's own ---------------------------------------------------

    def __enter__(self) -> TracedProducer:
        self.producer.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.producer.close()

    def start(self, timeout: float | None = None) -> None:
        """:meth:`Producer.start <gnsqlite.producer.Producer.start>`; blocks as it does."""
        self.producer.start(timeout)

    def close(self) -> None:
        """:meth:`Producer.close <gnsqlite.producer.Producer.close>`."""
        self.producer.close()

    def stats(self) -> dict[str, Any]:
        """:meth:`Producer.stats <gnsqlite.producer.Producer.stats>`."""
        return self.producer.stats()

    def health(self) -> Health:
        """:meth:`Producer.health <gnsqlite.producer.Producer.health>`."""
        return self.producer.health()

    # -- publishing -------------------------------------------------------------

    def publish(
        self, topic: str, body: Body, defer: float | None = None, timeout: float | None = None
    ) -> None:
        """PUB (DPUB with ``defer`` seconds) in a PRODUCER span; blocks until nsqd answers."""
        span = self._begin(topic, "DPUB" if defer is not None else "PUB", [body])
        self._call(
            span, lambda: self.producer.publish(topic, self._seal(span, [body])[0], defer, timeout)
        )

    def multi_publish(
        self, topic: str, bodies: Iterable[Body], timeout: float | None = None
    ) -> None:
        """MPUB in one PRODUCER span for the batch; blocks until nsqd answers."""
        listed = self._listed(bodies)
        span = self._begin(topic, "MPUB", listed)
        self._call(
            span, lambda: self.producer.multi_publish(topic, self._seal(span, listed), timeout)
        )

    def publish_async(
        self, topic: str, body: Body, defer: float | None = None, timeout: float | None = None
    ) -> gevent.event.AsyncResult[bytes]:
        """Like :meth:`publish`, returning the producer's ``AsyncResult``; the span ends with it."""
        span = self._begin(topic, "DPUB" if defer is not None else "PUB", [body])
        return self._ending(
            span,
            lambda: self.producer.publish_async(topic, self._seal(span, [body])[0], defer, timeout),
        )

    def multi_publish_async(
        self, topic: str, bodies: Iterable[Body], timeout: float | None = None
    ) -> gevent.event.AsyncResult[bytes]:
        """Like :meth:`multi_publish`, returning the ``AsyncResult``; the span ends with it."""
        listed = self._listed(bodies)
        span = self._begin(topic, "MPUB", listed)
        return self._ending(
            span,
            lambda: self.producer.multi_publish_async(topic, self._seal(span, listed), timeout),
        )

    # -- the span and the envelope ---------------------------------------------

    @staticmethod
    def _listed(bodies: Iterable[Body]) -> list[Body]:
        if isinstance(bodies, (bytes, str)):
            raise TypeError("multi_publish takes a list of bodies, not one bytes or str")
        return list(bodies)

    def _begin(self, topic: str, command: str, bodies: Sequence[Body]) -> trace.Span:
        """The ``publish {topic}`` span of one command, a child of the current span."""
        attributes: dict[str, Any] = {
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.type": "send",
            "messaging.operation.name": "publish",
            "messaging.destination.name": topic,
            "messaging.nsq.command": command,
        }
        if command == "MPUB":
            attributes["messaging.batch.message_count"] = len(bodies)
        elif isinstance(bodies[0], (bytes, bytearray, memoryview, str)):
            attributes["messaging.message.body.size"] = len(as_body(bodies[0]))
        return self._tracer.start_span(
            f"publish {topic}", kind=trace.SpanKind.PRODUCER, attributes=attributes
        )

    def _seal(self, span: trace.Span, bodies: Sequence[Body]) -> list[Body]:
        """``bodies`` in trace envelopes carrying ``span``'s context (``envelope`` off, or
        no valid context: as they are). An empty body is left as it is: the producer
        refuses it, as nsqd would."""
        if not self.envelope:
            return list(bodies)
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
        parent = carrier.get("traceparent")
        if parent is None:
            return list(bodies)
        state = carrier.get("tracestate", "")
        raws = [as_body(body) for body in bodies]
        return [seal_envelope(raw, parent, state) if raw else raw for raw in raws]

    @staticmethod
    def _call(span: trace.Span, publish: Callable[[], None]) -> None:
        """``publish()``, blocking; then ``span`` ended, failed if it raised."""
        try:
            publish()
        except BaseException as exc:
            _failed(span, exc)
            raise
        finally:
            span.end()

    @staticmethod
    def _ending(
        span: trace.Span, submit: Callable[[], gevent.event.AsyncResult[bytes]]
    ) -> gevent.event.AsyncResult[bytes]:
        """``submit()``'s result, with ``span`` ended when it resolves (or now, if it raised)."""
        try:
            result = submit()
        except BaseException as exc:
            _failed(span, exc)
            span.end()
            raise

        def done(resolved: gevent.event.AsyncResult[bytes]) -> None:
            error = resolved.exception
            if error is not None:
                _failed(span, error)
            span.end()

        result.rawlink(done)
        return result
