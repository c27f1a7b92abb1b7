"""Prometheus metrics for Consumers and Producers (the ``metrics`` extra).

::

    from gnsqlite.metrics import instrument
    instrument(consumer)          # or a Producer, or the pynsq drop-in's Reader/Writer
    instrument(producer)          # both registered in prometheus_client's default registry

The metrics, their labels and what they mean are listed in :data:`METRICS`
(and in ``docs/metrics.md``).

Two ways of exporting, chosen by how prometheus_client itself runs:

* **One process** (the usual case): one custom collector per registry reads
  each instrumented client's own counters (``stats()``) when Prometheus
  scrapes, so counting costs nothing on the message path. The two
  histograms need one observation per event, kept in plain numbers: two
  clock reads, a bisect and two additions in the handler's worker greenlet
  (handler seconds) and in the greenlet that reads a publish's answer
  (publish seconds).
* **Multiprocess mode** (``PROMETHEUS_MULTIPROC_DIR`` set before
  prometheus_client is imported, e.g. under gunicorn with several workers):
  a custom collector's samples are not shared between processes (the
  ``MultiProcessCollector`` reads only the files that prometheus_client's
  own metric objects write), so each process mirrors the same numbers into
  prometheus_client ``Counter``, ``Gauge`` and ``Histogram`` objects every
  ``sync_interval`` seconds, on a timer of the hub: the growth since the
  last sync, in one write per series. The message path costs what it costs
  in one process (writing each observation to the memory-mapped files
  directly cost about a fifth of the consume rate); the price is that a
  scrape sees figures up to ``sync_interval`` seconds old. Gauges use
  ``livesum`` (``livemax`` for backoff level and starvation): call
  :func:`mark_process_dead` from gunicorn's ``child_exit`` hook so a dead
  worker's gauges leave the sums.

:func:`exposition` renders the text for a ``/metrics`` endpoint in either
mode. Instrumenting the same client twice returns the same
:class:`Instrumentation`; several clients in one registry are told apart by
their labels, and clients with the same labels (two consumers of one
channel) are summed (the maximum for backoff level and starvation).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from typing import Any
from weakref import WeakKeyDictionary

try:
    import prometheus_client
    from prometheus_client import values as _values
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.multiprocess import MultiProcessCollector
    from prometheus_client.multiprocess import mark_process_dead as _mark_process_dead
    from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "gnsqlite.metrics needs prometheus_client: pip install 'gnsqlite[metrics]'"
    ) from exc

from . import metrics_catalog as catalog
from .consumer import COUNTERS, Consumer
from .metrics_catalog import HANDLER_BUCKETS, METRICS, PUBLISH_BUCKETS, MetricSpec
from .producer import Producer
from .timers import TimerWheel

__all__ = [
    "HANDLER_BUCKETS",
    "METRICS",
    "PUBLISH_BUCKETS",
    "Instrumentation",
    "MetricSpec",
    "exposition",
    "instrument",
    "mark_process_dead",
    "multiprocess_mode",
]

_BY_COUNTER = dict(zip(COUNTERS, catalog.COUNTER_SPECS, strict=True))
_STATES = ("connected", "disconnected")

Labels = tuple[str, ...]


class _Buckets:
    """A histogram kept in plain numbers: one ``observe`` is a bisect and two additions."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bucket, not cumulative; the last is +Inf
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds

    def add(self, other: _Buckets) -> None:
        for i, n in enumerate(other.counts):
            self.counts[i] += n
        self.sum += other.sum

    def cumulative(self) -> list[tuple[str, float]]:
        total = 0
        out = []
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(total)))
        return out


class _Reading:
    """The samples of one look at some clients, merged by metric and label values."""

    def __init__(self) -> None:
        self.values: dict[MetricSpec, dict[Labels, float]] = {}
        self.histograms: dict[MetricSpec, dict[Labels, _Buckets]] = {}

    def add(self, spec: MetricSpec, labels: Labels, value: float) -> None:
        series = self.values.setdefault(spec, {})
        old = series.get(labels)
        if old is None:
            series[labels] = value
        else:
            series[labels] = max(old, value) if spec.merge == "max" else old + value

    def add_histogram(self, spec: MetricSpec, labels: Labels, buckets: _Buckets) -> None:
        series = self.histograms.setdefault(spec, {})
        merged = series.get(labels)
        if merged is None:
            merged = series[labels] = _Buckets(spec.buckets)
        merged.add(buckets)


def multiprocess_mode() -> bool:
    """True when prometheus_client runs in multiprocess mode.

    prometheus_client decides when it is first imported, from
    ``PROMETHEUS_MULTIPROC_DIR`` in the environment.
    """
    return _values.ValueClass is not _values.MutexValue


class Instrumentation:
    """What :func:`instrument` returns: the link between one client and a registry.

    :meth:`close` stops exporting the client (its series leave the next
    scrape; in multiprocess mode its counters stay in the shared files).
    """

    def __init__(self, client: Consumer | Producer, exporter: _Exporter, timing: bool) -> None:
        self.client = client
        self.timing = timing  # the histograms are kept
        self.role = "consumer" if isinstance(client, Consumer) else "producer"
        self._exporter = exporter
        self._handler = _Buckets(HANDLER_BUCKETS)
        self._publish: dict[tuple[str, str], _Buckets] = {}
        self.closed = False

    def __repr__(self) -> str:
        return f"<Instrumentation {self.client!r}>"

    def close(self) -> None:
        """Stop exporting the client and remove its timing hooks. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        if isinstance(self.client, Consumer):
            self.client.set_handler_timing(None)
        else:
            self.client.set_publish_timing(None)
        self._exporter.remove(self)

    # -- the hook of a producer's publish timing ---------------------------------

    def _observe_publish(self, topic: str, command: str, seconds: float) -> None:
        buckets = self._publish.get((topic, command))
        if buckets is None:
            buckets = self._publish[(topic, command)] = _Buckets(PUBLISH_BUCKETS)
        buckets.observe(seconds)

    # -- reading ---------------------------------------------------------------

    def read(self, reading: _Reading) -> None:
        """Add this client's samples to ``reading``; does not block."""
        if isinstance(self.client, Consumer):
            self._read_consumer(self.client, reading)
        else:
            self._read_producer(self.client, reading)
        for conn in self.client.health().connections:
            for state in _STATES:
                up = conn.connected == (state == "connected")
                value = 1.0 if up else 0.0
                reading.add(catalog.CONNECTIONS, (self.role, conn.address, state), value)

    def _read_consumer(self, consumer: Consumer, reading: _Reading) -> None:
        stats = consumer.stats()
        channel = (stats["topic"], stats["channel"])
        for nsqd, counts in stats["by_nsqd"].items():
            for key, spec in _BY_COUNTER.items():
                reading.add(spec, (*channel, nsqd), counts[key])
        for conn in stats["connections"]:
            reading.add(catalog.IN_FLIGHT, (*channel, conn["address"]), conn["in_flight"])
            reading.add(catalog.RDY, (*channel, conn["address"]), conn["rdy"])
        dead = stats["dead_letters"]
        if dead is not None:
            for outcome in ("published", "failed"):
                reading.add(catalog.DEAD_LETTERS, (*channel, dead["topic"], outcome), dead[outcome])
        for wrapper in consumer.handler_wrappers:  # gnsqlite.tracing's counts its envelopes
            envelopes = getattr(wrapper, "envelope_counts", None)
            for outcome, count in envelopes.items() if envelopes is not None else ():
                reading.add(catalog.ENVELOPES, (*channel, outcome), count)
        reading.add(catalog.BACKOFF_LEVEL, channel, float(stats["backoff"].get("level", 0)))
        reading.add(catalog.STARVED, channel, 1.0 if stats["starved"] else 0.0)
        if self.timing:
            reading.add_histogram(catalog.HANDLER_SECONDS, channel, self._handler)

    def _read_producer(self, producer: Producer, reading: _Reading) -> None:
        stats = producer.stats()
        for row in stats["publishes"]:
            reading.add(catalog.PUBLISHES, (row["topic"], row["command"]), row["count"])
            reading.add(catalog.MESSAGES, (row["topic"], row["command"]), row["messages"])
        for code, count in stats["errors"].items():
            reading.add(catalog.PUBLISH_ERRORS, (code,), count)
        reading.add(catalog.PUBLISH_IN_FLIGHT, (), stats["in_flight"])
        discovery = stats["discovery"]
        if discovery is not None:
            reading.add(catalog.LOOKUPD_POLLS, ("answered",), discovery["polls"])
            reading.add(catalog.LOOKUPD_POLLS, ("failed",), discovery["failed_polls"])
            reading.add(catalog.NSQD_CHANGES, ("added",), discovery["added"])
            reading.add(catalog.NSQD_CHANGES, ("removed",), discovery["removed"])
            reading.add(catalog.NSQD_DISCOVERED, (), len(discovery["nsqd"]))
        for labels, buckets in self._publish.items():
            reading.add_histogram(catalog.PUBLISH_SECONDS, labels, buckets)


class _Exporter:
    """The clients instrumented into one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.instruments: dict[int, Instrumentation] = {}

    def add(self, client: Consumer | Producer, timing: bool = True) -> Instrumentation:
        found = self.instruments.get(id(client))
        if found is not None and found.client is client:
            return found
        inst = Instrumentation(client, self, timing)
        self.instruments[id(client)] = inst
        self.hook(inst)
        return inst

    def remove(self, inst: Instrumentation) -> None:
        if self.instruments.get(id(inst.client)) is inst:
            del self.instruments[id(inst.client)]

    def hook(self, inst: Instrumentation) -> None:
        """Time handlers or publishes into the instrumentation's own buckets (if it times)."""
        if not inst.timing:
            return
        if isinstance(inst.client, Consumer):
            inst.client.set_handler_timing(inst._handler.observe)
        else:
            inst.client.set_publish_timing(inst._observe_publish)

    def read(self) -> _Reading:
        reading = _Reading()
        for inst in list(self.instruments.values()):
            inst.read(reading)
        return reading


class _CollectorExporter(_Exporter, Collector):
    """One process: a custom collector reading the clients at scrape time."""

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        registry.register(self)

    def describe(self) -> Iterable[Metric]:
        return list(_families(_Reading()))

    def collect(self) -> Iterable[Metric]:
        return list(_families(self.read()))


def _families(reading: _Reading) -> Iterator[Metric]:
    """Every metric of :data:`METRICS` with the samples of ``reading``."""
    for spec in METRICS.values():
        if spec.kind == "histogram":
            histogram = HistogramMetricFamily(spec.name, spec.help, labels=spec.labels)
            for labels, buckets in sorted(reading.histograms.get(spec, {}).items()):
                histogram.add_metric(list(labels), buckets.cumulative(), buckets.sum)
            yield histogram
            continue
        family: CounterMetricFamily | GaugeMetricFamily = (
            CounterMetricFamily(spec.name, spec.help, labels=spec.labels)
            if spec.kind == "counter"
            else GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)
        )
        for labels, value in sorted(reading.values.get(spec, {}).items()):
            family.add_metric(list(labels), value)
        yield family


class _MirrorExporter(_Exporter):
    """Multiprocess mode: prometheus_client metrics, brought up to date on a timer.

    Counters get the growth since the last sync, per client (so closing one
    never makes a sum go down); gauges are set to the merged value of every
    client, and series that vanished (a lost connection) are set to 0.
    """

    def __init__(self, registry: CollectorRegistry, sync_interval: float) -> None:
        super().__init__(registry)
        self.sync_interval = sync_interval
        self.metrics: dict[MetricSpec, Any] = {}
        for spec in METRICS.values():
            if spec.kind == "counter":
                self.metrics[spec] = prometheus_client.Counter(
                    spec.name, spec.help, spec.labels, registry=registry
                )
            elif spec.kind == "gauge":
                self.metrics[spec] = prometheus_client.Gauge(
                    spec.name,
                    spec.help,
                    spec.labels,
                    registry=registry,
                    multiprocess_mode=spec.multiprocess_mode,  # type: ignore[arg-type]
                )
            else:
                self.metrics[spec] = prometheus_client.Histogram(
                    spec.name, spec.help, spec.labels, registry=registry, buckets=spec.buckets
                )
        # per instrumentation: what its counters and buckets were at the last sync
        self._synced: dict[int, dict[tuple[MetricSpec, Labels], float]] = {}
        self._synced_buckets: dict[int, dict[tuple[MetricSpec, Labels], _Buckets]] = {}
        self._gauges: set[tuple[MetricSpec, Labels]] = set()
        self._wheel: TimerWheel | None = None

    def hook(self, inst: Instrumentation) -> None:
        super().hook(inst)
        if self._wheel is None:
            self._wheel = TimerWheel.for_hub()
            self._wheel.call_every(self.sync_interval, self.sync, owner=self)
        self._sync()

    def remove(self, inst: Instrumentation) -> None:
        self._sync()  # its last counts reach the shared files
        super().remove(inst)
        self._synced.pop(id(inst), None)
        self._synced_buckets.pop(id(inst), None)
        self._sync()  # and its gauges leave the sums
        if not self.instruments and self._wheel is not None:
            self._wheel.cancel_owner(self)
            self._wheel = None

    def _child(self, spec: MetricSpec, labels: Labels) -> Any:
        metric = self.metrics[spec]
        return metric.labels(*labels) if labels else metric

    def sync(self) -> None:
        """Bring the shared metrics up to date with every client; does not block.

        A client that was closed gets its last sync, then leaves; the timer
        stops with the last one.
        """
        for inst in list(self.instruments.values()):
            if inst.client.closed and not inst.closed:
                inst.close()  # calls remove(): a last sync without it, the timer maybe cancelled
        self._sync()

    def _sync(self) -> None:
        merged = _Reading()  # the gauges of every client, merged
        for inst in list(self.instruments.values()):
            reading = _Reading()
            inst.read(reading)
            synced = self._synced.setdefault(id(inst), {})
            for spec, series in reading.values.items():
                for labels, value in series.items():
                    if spec.kind == "gauge":
                        merged.add(spec, labels, value)
                        continue
                    grown = value - synced.get((spec, labels), 0.0)
                    if grown > 0:
                        self._child(spec, labels).inc(grown)
                        synced[(spec, labels)] = value
            before = self._synced_buckets.setdefault(id(inst), {})
            for spec, histograms in reading.histograms.items():
                for labels, buckets in histograms.items():
                    last = before.get((spec, labels))
                    _add_growth(self._child(spec, labels), buckets, last)
                    before[(spec, labels)] = buckets
        gauges = {
            (spec, labels): value
            for spec, series in merged.values.items()
            for labels, value in series.items()
        }
        for key in self._gauges - gauges.keys():
            gauges[key] = 0.0  # a series that vanished (a lost connection)
        for (spec, labels), value in gauges.items():
            self._child(spec, labels).set(value)
        self._gauges = {key for key, value in gauges.items() if value or key in self._gauges}


def _add_growth(histogram: Any, now: _Buckets, before: _Buckets | None) -> None:
    """Add to a prometheus_client ``Histogram`` child what ``now`` grew since ``before``.

    prometheus_client has no public call for "n observations in bucket i",
    so this adds to the child's per-bucket values and sum (``_buckets``,
    ``_sum``: non-cumulative, as ``observe()`` fills them, in every release
    since 0.1). Where they are missing it replays the observations instead,
    each at its bucket's bound: counts stay exact, the sum approximate.
    """
    counts = [n - (before.counts[i] if before else 0) for i, n in enumerate(now.counts)]
    grown_sum = now.sum - (before.sum if before else 0.0)
    if not any(counts):
        return
    values, total = getattr(histogram, "_buckets", None), getattr(histogram, "_sum", None)
    if values is not None and total is not None and len(values) == len(counts):
        for value, n in zip(values, counts, strict=True):
            if n:
                value.inc(n)
        total.inc(grown_sum)
        return
    for bound, n in zip((*now.bounds, 2 * now.bounds[-1]), counts, strict=True):
        for _ in range(n):
            histogram.observe(bound)


_EXPORTERS: WeakKeyDictionary[CollectorRegistry, _Exporter] = WeakKeyDictionary()


def instrument(
    obj: Any,
    registry: CollectorRegistry | None = None,
    *,
    sync_interval: float = 1.0,
    timing: bool = True,
) -> Instrumentation:
    """Export ``obj``'s metrics to ``registry`` (default: prometheus_client's ``REGISTRY``).

    ``obj`` is a :class:`~gnsqlite.consumer.Consumer`, a
    :class:`~gnsqlite.producer.Producer`, or the pynsq drop-in's
    ``Reader``/``Writer`` (their ``consumer``/``producer`` is instrumented).
    Call it before or after ``start()``; it opens nothing and does not
    block. Instrumenting the same client into the same registry again
    returns the same :class:`Instrumentation`. ``timing=False`` leaves the
    two histograms out (``handler_seconds``, ``publish_seconds``; their
    series stay empty): the only per-message cost (about 0.2 µs) is gone.
    In multiprocess mode (see the module docstring) the figures reach the
    shared directory every ``sync_interval`` seconds, on a timer of the
    current hub owned by the registry's exporter; a client that was closed
    is synced a last time and dropped, and the timer stops with the last
    client (or when each :class:`Instrumentation` is closed).
    """
    client = _client_of(obj)
    if not (isinstance(sync_interval, (int, float)) and sync_interval > 0):
        raise ValueError(f"sync_interval={sync_interval!r}: use a number of seconds above 0")
    registry = REGISTRY if registry is None else registry
    exporter = _EXPORTERS.get(registry)
    if exporter is None:
        exporter = _EXPORTERS[registry] = (
            _MirrorExporter(registry, float(sync_interval))
            if multiprocess_mode()
            else _CollectorExporter(registry)
        )
    return exporter.add(client, timing)


def _client_of(obj: Any) -> Consumer | Producer:
    if isinstance(obj, (Consumer, Producer)):
        return obj
    inner = getattr(obj, "consumer", None) or getattr(obj, "producer", None)
    if isinstance(inner, (Consumer, Producer)):
        return inner  # the pynsq drop-in's Reader (.consumer) or Writer (.producer)
    raise TypeError(
        f"cannot instrument {obj!r}: pass a gnsqlite Consumer or Producer, or a"
        " gnsqlite.nsq Reader or Writer"
    )


def exposition(registry: CollectorRegistry | None = None) -> tuple[bytes, str]:
    """``(body, content_type)`` for a ``/metrics`` answer; does not block.

    In multiprocess mode the body sums every process's metrics from
    ``PROMETHEUS_MULTIPROC_DIR`` (``registry`` is then ignored: a fresh one
    with a ``MultiProcessCollector`` is used, as prometheus_client asks);
    otherwise it is ``registry`` (default ``REGISTRY``).
    """
    if multiprocess_mode():
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    elif registry is None:
        registry = REGISTRY
    return prometheus_client.generate_latest(registry), prometheus_client.CONTENT_TYPE_LATEST


def mark_process_dead(pid: int) -> None:
    """Drop a dead worker's live gauges (gunicorn's ``child_exit`` hook calls this).

    A no-op outside multiprocess mode.
    """
    if multiprocess_mode():
        _mark_process_dead(pid)  # type: ignore[no-untyped-call]
