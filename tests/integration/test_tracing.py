"""Tracing across the queue (gnsqlite.tracing) against a live nsqd, embedded or real.

The spans are recorded with OpenTelemetry's SDK and its InMemorySpanExporter
(the test extra installs both); each test asserts what a user reads in a trace
viewer: one trace from a publish through nsqd into a handler that publishes
again, the conventions' attributes, and the envelope handed over as promised.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import gevent.event
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from gnsqlite.consumer import Consumer
from gnsqlite.message import Message, RequeueMessage
from gnsqlite.metrics import instrument
from gnsqlite.producer import Producer
from gnsqlite.testing import NsqdServer, wait_until
from gnsqlite.trace_envelope import MAGIC, open_envelope, seal_envelope
from gnsqlite.tracing import TracedProducer, trace_consumer

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@dataclass
class Traced:
    """An nsqd, a traced producer on it, the SDK's provider and the exporter keeping its spans."""

    nsqd: NsqdServer
    producer: TracedProducer
    provider: TracerProvider
    exporter: InMemorySpanExporter
    consumers: list[Consumer]

    def consume(self, topic: str, channel: str, traced: bool = True, **options: Any) -> Consumer:
        """A consumer of the nsqd (closed after the test), traced with the provider."""
        consumer = Consumer(topic, channel, nsqd_tcp_addresses=[self.nsqd.tcp_address], **options)
        self.consumers.append(consumer)
        if traced:
            trace_consumer(consumer, tracer_provider=self.provider)
        return consumer

    def spans(self, name: str) -> list[ReadableSpan]:
        """The finished spans called ``name``."""
        return by_name(self.exporter.get_finished_spans(), name)


@pytest.fixture
def traced(nsqd: NsqdServer, consumers: list[Consumer]) -> Iterator[Traced]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    producer = TracedProducer(Producer([nsqd.tcp_address]), tracer_provider=provider)
    producer.start()
    yield Traced(nsqd, producer, provider, exporter, consumers)
    producer.close()
    provider.shutdown()


def ids(context: trace.SpanContext | None) -> tuple[int, int] | None:
    """A span context as (trace id, span id): a remote parent equals the span it names."""
    return None if context is None else (context.trace_id, context.span_id)


def by_name(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def test_one_trace_from_a_publish_through_nsqd_into_handlers_that_publish_again(
    traced: Traced,
) -> None:
    # The crawler's shape: a fetch handler publishes each result; a batch
    # handler parses results and MPUBs the new URLs back to the fetchers.
    seen_ids: dict[str, bytes] = {}  # message id -> the body the handler saw
    parsed: list[str] = []
    done = gevent.event.Event()

    def fetch(message: Message) -> None:
        seen_ids[message.id] = message.body
        job = json.loads(message.body)
        traced.producer.publish("trace_results", json.dumps({**job, "html": f"page {job['url']}"}))

    def parse(messages: list[Message]) -> None:
        new = []
        for message in messages:
            seen_ids[message.id] = message.body
            result = json.loads(message.body)
            parsed.append(result["url"])
            if result["depth"] == 0:
                new += [json.dumps({"url": f"/{n}", "depth": 1}) for n in (1, 2)]
        if new:
            traced.producer.multi_publish("trace_urls", new)
        if len(parsed) == 3:
            done.set()

    fetcher = traced.consume("trace_urls", "fetch", handler=fetch, max_in_flight=4)
    parser = traced.consume(
        "trace_results",
        "parse",
        batch_handler=parse,
        batch_size=2,
        batch_timeout=0.05,
        max_in_flight=4,
    )
    for consumer in (fetcher, parser):
        consumer.start()
    tracer = traced.provider.get_tracer("test")
    with tracer.start_as_current_span("crawl") as root:
        traced.producer.publish("trace_urls", json.dumps({"url": "/", "depth": 0}))
    assert done.wait(15), f"parsed only {parsed}"

    def all_ended() -> bool:  # done is set inside the last handler, before its span ends
        spans = traced.exporter.get_finished_spans()
        parsed_links = sum(len(s.links) for s in by_name(spans, "process trace_results"))
        return len(by_name(spans, "process trace_urls")) == 3 and parsed_links == 3

    wait_until(all_ended)

    spans = traced.exporter.get_finished_spans()
    trace_id = root.get_span_context().trace_id
    [seed] = [
        s for s in by_name(spans, "publish trace_urls") if s.parent == root.get_span_context()
    ]
    assert seed.kind is trace.SpanKind.PRODUCER
    assert seed.attributes is not None
    assert seed.attributes["messaging.system"] == "nsq"
    assert seed.attributes["messaging.operation.type"] == "send"
    assert seed.attributes["messaging.destination.name"] == "trace_urls"
    assert seed.attributes["messaging.nsq.command"] == "PUB"

    fetches = by_name(spans, "process trace_urls")
    assert len(fetches) == 3  # the seed and the two links, each handled once
    first = next(s for s in fetches if ids(s.parent) == ids(seed.context))
    assert first.kind is trace.SpanKind.CONSUMER
    assert first.context.trace_id == trace_id  # through nsqd, one trace
    assert [ids(link.context) for link in first.links] == [ids(seed.context)]
    attrs = first.attributes or {}
    assert attrs["messaging.destination.name"] == "trace_urls"
    assert attrs["messaging.consumer.group.name"] == "fetch"
    assert attrs["messaging.nsq.message.attempts"] == 1
    message_id = attrs["messaging.message.id"]
    assert isinstance(message_id, str)
    # the handler saw the body as published: the envelope was taken out
    assert seen_ids[message_id] == json.dumps({"url": "/", "depth": 0}).encode()
    assert attrs["messaging.message.body.size"] == len(seen_ids[message_id])
    assert attrs["server.address"] == "127.0.0.1"

    # what the handler published is a child of its PROCESS span
    results = by_name(spans, "publish trace_results")
    assert len(results) == 3
    first_result = next(s for s in results if ids(s.parent) == ids(first.context))
    assert first_result.context.trace_id == trace_id

    # the batch's PROCESS span links to each message's creation context
    batches = by_name(spans, "process trace_results")
    first_batch = next(
        b for b in batches if ids(first_result.context) in [ids(k.context) for k in b.links]
    )
    count = (first_batch.attributes or {})["messaging.batch.message_count"]
    assert count == len(first_batch.links)  # every result was sealed: one link each
    link = next(k for k in first_batch.links if ids(k.context) == ids(first_result.context))
    assert (link.attributes or {})["messaging.nsq.message.attempts"] == 1

    # its MPUB is one PRODUCER span for the batch, the creation context of both messages
    [mpub] = [s for s in by_name(spans, "publish trace_urls") if s is not seed]
    assert ids(mpub.parent) == ids(first_batch.context)
    assert (mpub.attributes or {})["messaging.batch.message_count"] == 2
    assert (mpub.attributes or {})["messaging.nsq.command"] == "MPUB"
    assert {ids(s.parent) for s in fetches if s is not first} == {ids(mpub.context)}
    # a batch has no one parent: its span starts a trace of its own, linked to each message's
    assert first_batch.parent is None and first_batch.context.trace_id != trace_id
    assert {s.context.trace_id for s in fetches if s is not first} == {first_batch.context.trace_id}


def test_the_envelope_is_opt_in_and_bad_ones_reach_the_handler_unchanged(traced: Traced) -> None:
    bad = MAGIC + b"\x01 not an envelope"  # the magic, then lengths that do not add up
    foreign = seal_envelope(b"x", PARENT)[:-1] + b"xy"  # a body longer than declared
    plain = b"\xff plain bytes"
    bodies: dict[str, list[bytes]] = {"plain": [], "traced": []}
    both = gevent.event.Event()

    def handler_for(name: str) -> object:
        def handle(message: Message) -> None:
            bodies[name].append(message.body)
            if all(len(got) == 4 for got in bodies.values()):
                both.set()

        return handle

    untraced = traced.consume("trace_opt_in", "plain", False, handler=handler_for("plain"))
    tracing = traced.consume("trace_opt_in", "traced", False, handler=handler_for("traced"))
    counts = trace_consumer(tracing, tracer_provider=traced.provider)
    registry = CollectorRegistry()
    instrument(tracing, registry)
    for consumer in (untraced, tracing):
        consumer.start()
    wait_until(lambda: untraced.connections and tracing.connections)
    traced.producer.publish("trace_opt_in", b"hello")  # sealed: the span's context
    for body in (bad, foreign, plain):
        traced.producer.producer.publish("trace_opt_in", body)  # as they are
    assert both.wait(10), bodies

    sealed = next(body for body in bodies["plain"] if body not in (bad, foreign, plain))
    opened = open_envelope(sealed)  # the consumer without the option got the envelope as sent
    assert opened is not None and opened.body == b"hello"
    assert sorted(bodies["plain"]) == sorted([sealed, bad, foreign, plain])
    assert sorted(bodies["traced"]) == sorted([b"hello", bad, foreign, plain])
    assert counts.envelope_counts == {"opened": 1, "plain": 1, "invalid": 2}
    labels = {"topic": "trace_opt_in", "channel": "traced"}
    value = registry.get_sample_value
    assert value("gnsqlite_consumer_envelopes_total", {**labels, "outcome": "invalid"}) == 2
    assert value("gnsqlite_consumer_envelopes_total", {**labels, "outcome": "opened"}) == 1
    # every message is processed in a span; those without a context start their own trace
    wait_until(lambda: len(traced.spans("process trace_opt_in")) == 4)
    processed = traced.spans("process trace_opt_in")
    assert sum(1 for span in processed if span.parent is not None) == 1


def test_a_failed_handler_marks_its_span_and_the_redelivery_gets_its_own(traced: Traced) -> None:
    attempts: list[int] = []
    done = gevent.event.Event()

    def flaky(message: Message) -> None:
        attempts.append(message.attempts)
        if message.attempts == 1:
            raise ValueError("the first attempt fails")
        done.set()

    consumer = traced.consume("trace_flaky", "ch", handler=flaky, requeue_delay=0.0, backoff=None)
    consumer.start()
    traced.producer.publish("trace_flaky", b"job")
    assert done.wait(10), attempts
    wait_until(lambda: len(traced.spans("process trace_flaky")) == 2)
    failed, retried = sorted(
        traced.spans("process trace_flaky"),
        key=lambda s: s.start_time or 0,
    )
    assert (failed.attributes or {})["messaging.nsq.message.attempts"] == 1
    assert (retried.attributes or {})["messaging.nsq.message.attempts"] == 2
    assert failed.status.status_code is trace.StatusCode.ERROR
    assert (failed.attributes or {})["error.type"] == "ValueError"
    assert retried.status.status_code is trace.StatusCode.UNSET
    [publish] = traced.spans("publish trace_flaky")
    assert (
        ids(failed.parent) == ids(retried.parent) == ids(publish.context)
    )  # both deliveries, one trace


def test_a_failed_publish_ends_its_span_failed(traced: Traced) -> None:
    with pytest.raises(Exception) as raised:
        traced.producer.publish("bad topic!", b"x")
    [span] = traced.exporter.get_finished_spans()
    assert span.status.status_code is trace.StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == type(raised.value).__qualname__
    result = traced.producer.publish_async("trace_async", b"x")
    assert result.get(timeout=5) == b"OK"
    wait_until(lambda: len(traced.exporter.get_finished_spans()) == 2)
    assert traced.exporter.get_finished_spans()[1].status.status_code is trace.StatusCode.UNSET


_WITHOUT_OTEL = r"""
import sys
sys.modules["opentelemetry"] = None  # an import of it fails, as without the extra
import gevent.event
import gnsqlite
from gnsqlite import Consumer, Producer
got = gevent.event.AsyncResult()
consumer = Consumer("trace_no_otel", "ch", lambda m: got.set(m.body),
                    nsqd_tcp_addresses=[sys.argv[1]])
consumer.start()
with Producer([sys.argv[1]]) as producer:
    producer.publish("trace_no_otel", b"plain")
    assert got.get(timeout=10) == b"plain"
consumer.close()
import gnsqlite.metrics, gnsqlite.trace_envelope, gnsqlite.nsq, gnsqlite.cli  # nor do these
assert not [m for m in sys.modules if m.startswith("opentelemetry") and sys.modules[m]], "loaded"
try:
    import gnsqlite.tracing
except ImportError as exc:
    assert "pip install 'gnsqlite[tracing]'" in str(exc), exc
else:
    raise AssertionError("gnsqlite.tracing imported without opentelemetry")
print("ok")
"""


def test_without_opentelemetry_the_clients_work_and_tracing_says_what_to_install(
    nsqd: NsqdServer,
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_OTEL, nsqd.tcp_address],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_requeue_message_is_an_answer_not_an_error(traced: Traced) -> None:
    done = gevent.event.Event()

    def later(message: Message) -> None:
        if message.attempts == 1:
            raise RequeueMessage(delay=0.0)
        done.set()

    consumer = traced.consume("trace_requeue", "ch", handler=later)
    consumer.start()
    traced.producer.publish("trace_requeue", b"job")
    assert done.wait(10)
    wait_until(lambda: len(traced.spans("process trace_requeue")) == 2)
    first = min(
        traced.spans("process trace_requeue"),
        key=lambda s: s.start_time or 0,
    )
    assert first.status.status_code is trace.StatusCode.UNSET
    assert (first.attributes or {})["messaging.nsq.requeued"] is True


def test_without_a_trace_context_to_carry_the_body_goes_out_as_it_is(traced: Traced) -> None:
    got: gevent.event.AsyncResult[bytes] = gevent.event.AsyncResult()
    consumer = traced.consume("trace_noop", "ch", False, handler=lambda m: got.set(m.body))
    consumer.start()
    plain = Producer([traced.nsqd.tcp_address])
    noop = TracedProducer(plain, tracer_provider=trace.NoOpTracerProvider())
    with noop:
        noop.publish("trace_noop", b"plain")  # the no-op API, no current span: nothing to carry
    assert got.get(timeout=10) == b"plain"
