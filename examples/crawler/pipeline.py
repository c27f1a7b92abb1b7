"""A crawler pipeline over NSQ: URLs in, pages fetched, links parsed, URLs out.

Two topics and two stages, each a gnsqlite Consumer:

* ``urls`` (channel ``fetch``): fetcher greenlets (``--fetchers`` of them, the
  Consumer's ``max_in_flight``) download each URL and publish what they got
  to ``results``;
* ``results`` (channel ``parse``): the parse stage, a batch handler, takes
  the pages in batches, extracts the links of each page, keeps those on the
  same site, within ``--max-depth`` and not seen before, and publishes the
  batch's new links to ``urls`` in one MPUB.

The parse stage knows how many URLs are outstanding (published but not yet
parsed back); when none is left the crawl is complete and the program stops
everything, prints a summary and exits. Redelivered messages are harmless:
a result parsed twice is recognised and skipped.

A bad option, or no nsqd answering at the address, stops it before it starts
with one line on stderr (``__main__.py`` prints it) and exit status 1.

With ``--trace FILE`` the crawl is traced with OpenTelemetry
(:mod:`gnsqlite.tracing`, the ``tracing`` extra, and the SDK): each publish is
a PRODUCER span whose context travels inside the message (a trace envelope),
each handler call a CONSUMER span, and the spans are written to FILE as JSON
lines when the crawl ends (the SDK's in-memory exporter; a real program hands
them to an exporter for Jaeger, Tempo ...).
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.error
import urllib.request
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit

import gevent.event
from testsite import TestSite

from gnsqlite.connection import Connection
from gnsqlite.consumer import Consumer
from gnsqlite.message import Message
from gnsqlite.producer import Producer


class LinkParser(HTMLParser):
    """Collects the ``href`` of every ``<a>``."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.extend(value for name, value in attrs if name == "href" and value)


class Crawler:
    """The pipeline: see the module docstring."""

    def __init__(
        self, nsqd: str, max_depth: int, fetchers: int, tracer_provider: Any = None
    ) -> None:
        self.nsqd = nsqd
        self.max_depth = max_depth
        self.fetchers = fetchers
        self.tracer_provider = tracer_provider
        self.producer: Any = Producer([nsqd])
        self.seen: set[str] = set()
        self.parsed: set[str] = set()
        self.outstanding = 0
        self.batches = 0  # parse batches handled
        self.done = gevent.event.Event()
        self.site_host = ""
        self.consumers = [
            Consumer(
                "urls",
                "fetch",
                self.fetch,
                nsqd_tcp_addresses=[nsqd],
                max_in_flight=fetchers,
                requeue_delay=0.5,
            ),
            # Pages are parsed in batches (up to one per fetcher, or what came
            # within 10 ms), so the links of many pages go out in one MPUB.
            Consumer(
                "results",
                "parse",
                batch_handler=self.parse,
                nsqd_tcp_addresses=[nsqd],
                batch_size=fetchers,
                batch_timeout=0.01,
                max_in_flight=2 * fetchers,
            ),
        ]

        if tracer_provider is not None:  # --trace: every publish and handler call is a span
            from gnsqlite.tracing import TracedProducer, trace_consumer

            self.producer = TracedProducer(self.producer, tracer_provider=tracer_provider)
            for consumer in self.consumers:
                trace_consumer(consumer, tracer_provider=tracer_provider)

    def crawl(self, seed: str, timeout: float) -> bool:
        """Crawl from ``seed``; blocks until done or ``timeout`` seconds. ``True`` if done."""
        self.site_host = urlsplit(seed).netloc
        self.producer.start()
        for consumer in self.consumers:
            consumer.start()
        self.seen.add(seed)
        self.outstanding = 1
        first = json.dumps({"url": seed, "depth": 0})
        if self.tracer_provider is None:
            self.producer.publish("urls", first)
        else:  # the crawl's root span: the seed's publish is its child
            with self.tracer_provider.get_tracer("crawler").start_as_current_span("crawl"):
                self.producer.publish("urls", first)
        try:
            return bool(self.done.wait(timeout))
        finally:
            for consumer in self.consumers:
                consumer.close()
            self.producer.close()

    def fetch(self, message: Message) -> None:
        """Fetcher stage: download one URL and publish the result."""
        job = json.loads(message.body)
        try:
            with urllib.request.urlopen(job["url"], timeout=10) as response:
                status, html = response.status, response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            status, html = exc.code, ""
        self.producer.publish("results", json.dumps({**job, "status": status, "html": html}))

    def parse(self, messages: list[Message]) -> None:
        """Parse stage (a batch handler): publish the new links of a batch of pages in one
        MPUB; notice when the crawl is done. Raising requeues the whole batch."""
        new: list[str] = []
        pages: list[str] = []
        for message in messages:
            result = json.loads(message.body)
            if result["url"] in self.parsed or result["url"] in pages:
                continue  # a redelivery: already counted
            pages.append(result["url"])
            if result["depth"] >= self.max_depth:
                continue
            parser = LinkParser()
            parser.feed(result["html"])
            for href in parser.links:
                url = urldefrag(urljoin(result["url"], href)).url
                parts = urlsplit(url)
                on_site = parts.scheme == "http" and parts.netloc == self.site_host
                if on_site and url not in self.seen:
                    self.seen.add(url)
                    new.append(json.dumps({"url": url, "depth": result["depth"] + 1}))
        self.outstanding += len(new)
        if new:
            self.producer.multi_publish("urls", new)
        self.parsed.update(pages)
        self.outstanding -= len(pages)
        self.batches += 1
        if self.outstanding == 0:
            self.done.set()


def build_parser() -> argparse.ArgumentParser:
    """The options, each with its help and default."""
    parser = argparse.ArgumentParser(
        prog="crawler", description="Crawl a generated site through NSQ."
    )
    parser.add_argument(
        "--nsqd-tcp-address",
        required=True,
        metavar="ADDR",
        help="nsqd TCP address host:port (required)",
    )
    parser.add_argument(
        "--pages",
        type=int,
        default=300,
        metavar="N",
        help="pages of the generated site (default %(default)s)",
    )
    parser.add_argument(
        "--max-depth",
        type=int,
        default=6,
        metavar="D",
        help="follow links at most D clicks from the first page (default %(default)s)",
    )
    parser.add_argument(
        "--fetchers",
        type=int,
        default=20,
        metavar="N",
        help="pages fetched at once: the fetch stage's max_in_flight (default %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="give up after S seconds (default %(default)g)",
    )
    parser.add_argument(
        "--report", metavar="FILE", help="write a JSON report to FILE (default: none)"
    )
    parser.add_argument(
        "--trace",
        metavar="FILE",
        help="trace the crawl with OpenTelemetry and write its spans to FILE, one JSON"
        " object a line (needs gnsqlite[tracing] and opentelemetry-sdk; default: no tracing)",
    )
    return parser


def in_memory_tracing() -> tuple[Any, Any]:
    """A tracer provider whose spans are kept in memory, and the exporter that keeps them."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def span_record(span: Any) -> dict[str, Any]:
    """One finished span as a JSON-ready dict: ids in hex, parent and links by span id."""
    parent = span.parent
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{span.context.trace_id:032x}",
        "span_id": f"{span.context.span_id:016x}",
        "parent_id": None if parent is None else f"{parent.span_id:016x}",
        "links": [f"{link.context.span_id:016x}" for link in span.links],
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
    }


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    for name, value, least in (
        ("pages", args.pages, 1),
        ("max-depth", args.max_depth, 0),
        ("fetchers", args.fetchers, 1),
    ):
        if value < least:
            parser.error(f"--{name} must be {least} or more")

    provider, exporter = in_memory_tracing() if args.trace else (None, None)
    crawler = Crawler(
        args.nsqd_tcp_address, args.max_depth, args.fetchers, provider
    )  # checks the address
    probe = Connection(args.nsqd_tcp_address)
    probe.connect()  # raises NSQConnectionError when no nsqd answers there
    probe.close()
    site = TestSite(pages=args.pages)
    seed = site.start()
    started = time.monotonic()
    try:
        done = crawler.crawl(seed, args.timeout)
    finally:
        site.stop()
    elapsed = time.monotonic() - started
    reachable = [p for p, d in site.depth.items() if d <= args.max_depth]
    report: dict[str, Any] = {
        "done": done,
        "seconds": round(elapsed, 3),
        "site_pages": len(site.links),
        "within_depth": len(reachable),
        "max_depth": args.max_depth,
        "fetches": dict(site.fetches),
        "depth": site.depth,
        "parsed": len(crawler.parsed),
        "parse_batches": crawler.batches,
    }
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f)
    if args.trace:
        with open(args.trace, "w") as f:
            for span in exporter.get_finished_spans():
                f.write(json.dumps(span_record(span)) + "\n")
    fetched_once = sum(1 for p in reachable if site.fetches[p] == 1)
    print(
        f"crawl {'complete' if done else 'TIMED OUT'} in {elapsed:.2f} s: "
        f"{fetched_once}/{len(reachable)} pages within depth {args.max_depth} fetched once, "
        f"{sum(site.fetches.values())} fetches in all, "
        f"{len(crawler.parsed)} pages parsed in {crawler.batches} batches"
    )
    raise SystemExit(0 if done else 1)
