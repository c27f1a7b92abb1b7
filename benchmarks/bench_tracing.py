"""What tracing adds per message, in-process (no broker): the envelope codec and the spans.

Not a test: run it by hand, ``python benchmarks/bench_tracing.py`` (needs the
``tracing`` extra and opentelemetry-sdk). Prints microseconds per call, the best
of five repeats:

* ``seal_envelope`` and ``open_envelope`` of a 100-byte body with a W3C traceparent,
  and ``open_envelope`` of a plain body (the test a traced consumer makes of every body);
* the PROCESS wrapper around a handler that does nothing (a message built per call, the
  envelope opened each time), minus the same handler unwrapped;
* the PUBLISH side without the producer: the span begun, the body sealed, the span ended;

each with OpenTelemetry's no-op API (no SDK installed or configured) and with the SDK and a
``BatchSpanProcessor`` whose exporter drops the spans.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from gnsqlite.message import Message
from gnsqlite.producer import Producer
from gnsqlite.trace_envelope import open_envelope, seal_envelope
from gnsqlite.tracing import TracedProducer, trace_consumer

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class Dropping(SpanExporter):
    """Exports nothing: the SDK's own work is measured, not an exporter's."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class NoAnswers:
    """A responder that sends nothing."""

    def on_finish(self, message: Message) -> None: ...

    def on_requeue(self, message: Message, delay: float | None, backoff: bool) -> None: ...

    def on_touch(self, message: Message) -> None: ...


def micros(call: Callable[[], object], number: int) -> float:
    """Microseconds per ``call()``, the best of five repeats of ``number`` calls."""
    return min(timeit.repeat(call, number=number, repeat=5)) / number * 1e6


def codec(number: int) -> None:
    """The envelope's codec on a 100-byte body."""
    body = b"x" * 100
    sealed = seal_envelope(body, PARENT)
    seal = micros(lambda: seal_envelope(body, PARENT), number)
    print(f"seal_envelope, 100-byte body:  {seal:.2f} us")
    print(f"open_envelope, 100-byte body:  {micros(lambda: open_envelope(sealed), number):.2f} us")
    print(f"open_envelope, a plain body:   {micros(lambda: open_envelope(body), number):.3f} us")


def spans(label: str, provider: Any, number: int) -> None:
    """The PROCESS wrapper's and the PUBLISH side's cost with ``provider``."""
    from gnsqlite.consumer import Consumer

    body = b"x" * 100
    sealed = seal_envelope(body, PARENT)

    def message() -> Message:
        return Message(b"0123456789abcdef", sealed, 0, 1, "127.0.0.1:4150", NoAnswers(), 60.0)

    def nothing(message: Message) -> None:
        return None

    consumer = Consumer("bench", "ch", nothing, nsqd_tcp_addresses=["127.0.0.1:4150"])
    wrapped = trace_consumer(consumer, tracer_provider=provider)(nothing)
    plain = micros(lambda: nothing(message()), number)
    traced = micros(lambda: wrapped(message()), number)
    print(f"PROCESS span, {label:9}:      {traced - plain:.1f} us a handler call")
    producer = TracedProducer(Producer(["127.0.0.1:4150"]), tracer_provider=provider)

    def publish_side() -> None:
        span = producer._begin("bench", "PUB", [body])
        producer._seal(span, [body])
        span.end()

    print(f"PUBLISH span, {label:9}:      {micros(publish_side, number):.1f} us a publish")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--number", type=int, default=20000, help="calls per repeat")
    number = parser.parse_args().number
    codec(number)
    spans("no-op API", trace.NoOpTracerProvider(), number)
    sdk = TracerProvider()
    sdk.add_span_processor(BatchSpanProcessor(Dropping(), max_queue_size=1 << 20))
    spans("SDK", sdk, number)
    sdk.shutdown()


if __name__ == "__main__":
    main()
