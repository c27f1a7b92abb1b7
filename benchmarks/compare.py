"""The whole comparison of issue 12 in one command: gnsqlite, pynsq, gnsq and go-nsq's tools.

Not a test: run it by hand::

    python benchmarks/compare.py [--repeat 3] [--json out.json] [--plot out.png]
    GNSQLITE_NSQD=../shared/nsq/bin python benchmarks/compare.py   # against the real nsqd

For every workload (consume at max_in_flight 2500/100/1, sync PUB, PUB from 50
greenlets, MPUB of 100, and consume/MPUB over snappy, deflate and TLS) each
client runs in a fresh child process against the same nsqd (the real one when
``GNSQLITE_NSQD`` names its directory, else the embedded broker), clients in
a rotating order within each repetition. Each cell records messages per
second, the client's CPU seconds (``getrusage`` of the child around the timed
part; ``wait4`` for the Go tools) and nsqd's CPU seconds (``/proc/<pid>/stat``
of the server). The table shows the median and range over the repetitions,
the ratio of gnsqlite's median to the best Python peer's and to go-nsq's, the
ratio of gnsqlite's client CPU per message to theirs (same run, medians; lower
is better), and CPU per message. ``--tables-from report.json`` prints the
tables of an earlier ``--json`` report again, its ratios computed anew.
The Go row is go-nsq's ``bench_reader``/``bench_writer``
from the ``GNSQLITE_NSQD`` folder (one connection: ``GOMAXPROCS=1``), used
only when present; its "sync PUB" is ``bench_writer --batch-size 1`` (an MPUB
of one message, waited for). A consume run queues more messages than the
client is timed on, so the clock stops while nsqd is still streaming: when a
channel runs dry nsqd holds its last partial buffer for its
``output_buffer_timeout`` (250 ms), which would otherwise be timed too.

The latency-bound rows (sync PUB, MPUB of 100, max_in_flight 1) also run ``floor.py``'s
``bare-gevent`` and ``bare-socket`` columns: the same round trips with no
client library (``--no-floor`` skips them), printed in a table of their own
with each client's share of the bare gevent round trip. max_in_flight 1 also
runs ``bare-handoff``: a reader greenlet handing each message to a handler
greenlet through a gevent queue, the consumer structure with nothing else.

``--compiled-python PYTHON`` adds the ``gnsqlite-compiled`` column: the same cells
run by ``PYTHON``, a Python with the compiled build installed
(``GNSQLITE_COMPILE=1 pip install .``), and a table setting it beside the pure build
and go-nsq with issue 40's targets for it; each cell checks it runs the build asked.

``--memory-messages N`` adds the memory rows: a gnsqlite consumer's and a
producer's RSS over N messages (the issue's target is 5,000,000).
``--profile`` runs gnsqlite's cells once under cProfile and prints where the
time goes, per workload.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import re
import resource
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

BODY_SIZE = 100
CLIENTS = ("gnsqlite", "pynsq", "gnsq", "go")
#: gnsqlite's compiled build (``--compiled-python``): the same cells, run by a Python
#: that has the compiled wheel installed; its own table sets it beside the pure build.
COMPILED = "gnsqlite-compiled"
#: Issue 40's targets for the compiled build: its rate at least this times go-nsq's,
#: and its client CPU per message at most the reciprocal times go's.
COMPILED_GO_TARGETS = {"consume_2500": 1.0, "consume_100": 1.0}
#: The compiled build's targets on the latency-bound rows: its rate over bare-gevent's.
COMPILED_FLOOR_TARGETS = {"consume_1": 0.95, "pub_sync": 0.95}
PEERS = ("pynsq", "gnsq")
#: No client library: the least a round trip costs (``floor.py``); latency-bound rows only.
FLOORS = ("bare-gevent", "bare-socket", "bare-handoff")
TRANSPORTS = ("plain", "snappy", "deflate", "tls")
#: nsqd's ``--mem-queue-size`` at the defaults: room for the largest backlog queued
#: (``--go-messages``, 800,000), so every message stays in memory. No larger: nsqd makes
#: each topic's and channel's queue up front as a Go channel of that many pointers, which
#: its garbage collector scans on every cycle. At 10,000,000 (80 MB a queue) nsqd spent
#: 14 µs of CPU per message of PUB from 50 greenlets instead of 6.5, and the fastest
#: clients lost most. :func:`_mem_queue_size` raises it for larger runs.
MEM_QUEUE_SIZE = 1_000_000
#: Settling (:meth:`Bench.settle`): nsqd's CPU is sampled over windows of this
#: many seconds; it is idle in a window where it used at most one clock tick
#: (``/proc`` counts CPU in ticks of 10 ms: "nothing" cannot be told from less
#: than a tick), settled after :data:`SETTLE_IDLE_WINDOWS` idle windows in a row.
SETTLE_WINDOW = 0.1
SETTLE_IDLE_WINDOWS = 2
#: Each target is stated on the medians of at least this many runs (else "n/a").
MIN_RUNS = 5


@dataclass(frozen=True)
class Row:
    """One workload: ``kind`` consume (``param`` max_in_flight) or publish (``param`` mode)."""

    key: str
    title: str
    kind: str
    param: Any
    transport: str
    scale: float  # of --messages
    #: (vs the best Python peer, vs go-nsq): the least rate ratio wanted, None where none is set
    targets: tuple[float | None, float | None] = (None, None)
    #: the client CPU per message wanted at most, as a ratio to ``client``'s in the same run:
    #: ``(client, ratio)`` pairs, where ``client`` is a peer (``gnsq``) or ``go``
    cpu_targets: tuple[tuple[str, float], ...] = ()


#: Targets: issue 30's for the rows it names (rate, and client CPU per message against
#: go-nsq or gnsq in the same run); the other rows keep the rate targets of issue 12.
GO_CONSUME = (("go", 2.5),)

ROWS: tuple[Row, ...] = (
    # The rows measured against go-nsq run about as long as its bench_reader does
    # (--go-runfor, 1 s): at 100,000 messages a run lasts 0.3-0.5 s, and its
    # start-up (connecting, the RDY ramp, nsqd's first writes) swings the rate by half.
    Row(
        "consume_2500",
        "consume, max_in_flight 2500",
        "consume",
        2500,
        "plain",
        3.0,
        (None, 0.5),
        GO_CONSUME,
    ),
    Row(
        "consume_100",
        "consume, max_in_flight 100",
        "consume",
        100,
        "plain",
        3.0,
        (None, 0.5),
        GO_CONSUME,
    ),
    # The latency-bound rows run longer: their rates swing with the machine's scheduling.
    Row(
        "consume_1",
        "consume, max_in_flight 1",
        "consume",
        1,
        "plain",
        0.2,
        (1.3, None),
        (("gnsq", 0.5),),
    ),
    Row("pub_sync", "sync PUB", "publish", "sequential", "plain", 0.2, (1.5, 0.6), (("go", 1.5),)),
    Row("pub_50", "PUB from 50 greenlets", "publish", "pipelined", "plain", 0.2, (2.0, None)),
    Row("mpub_100", "MPUB of 100", "publish", "mpub", "plain", 2.0, (1.3, 0.8), (("go", 1.2),)),
    *(
        Row(f"consume_2500_{t}", f"consume 2500, {t}", "consume", 2500, t, 1.0, (1.0, None))
        for t in TRANSPORTS[1:]
    ),
    *(
        Row(f"mpub_100_{t}", f"MPUB of 100, {t}", "publish", "mpub", t, 2.0, (1.0, None))
        for t in TRANSPORTS[1:]
    ),
)


def row_count(row: Row, messages: int) -> int:
    """The messages a run of ``row`` is timed on, for ``--messages`` ``messages``."""
    return max(100, int(messages * row.scale) // 100 * 100)


def consume_backlog(count: int) -> int:
    """What a consume run of ``count`` messages queues first: more than the client takes.

    When a channel runs dry nsqd holds its last partial buffer until its
    output_buffer_timeout (250 ms), which would time nsqd's timer, not the client.
    """
    return count + max(2 * 2500, count // 10)


# -- the child: one client, one workload, one run ------------------------------------------


def _connection_options(client: str, transport: str, ca_file: str | None) -> dict[str, Any]:
    """Each client's keywords for ``transport`` (they name TLS settings differently)."""
    if transport in ("snappy", "deflate"):
        return {transport: True}
    if transport == "tls":
        if client == "gnsqlite":
            return {"tls_v1": True, "tls_ca_file": ca_file}
        return {
            "tls_v1": True,
            "tls_options": {"ca_certs": ca_file, "cert_reqs": ssl.CERT_REQUIRED},
        }
    return {}


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run_cell(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one cell in this process (the child); returns its figures."""
    import logging

    from gnsqlite.cli._bench_peers import CONSUME, PUBLISH
    from gnsqlite.cli.bench import consume_rate, publish_rate

    logging.getLogger("nsq").setLevel(logging.CRITICAL)  # pynsq's noise when it closes
    logging.getLogger("gnsq").setLevel(logging.ERROR)
    client = spec["client"]
    if client in PEERS:  # import before the clock starts
        __import__("nsq" if client == "pynsq" else "gnsq")
        __import__("tornado.ioloop")
    options = _connection_options(client, spec["transport"], spec.get("ca_file"))
    consume: Callable[..., float]
    publish: Callable[..., float]
    if client in FLOORS:
        import floor  # beside this script

        consume, publish = floor.consume(client), floor.publish(client)
    elif client == "gnsqlite":
        import gnsqlite

        if gnsqlite.compiled != spec.get("compiled", False):
            build = "the compiled build" if gnsqlite.compiled else "pure Python"
            raise RuntimeError(f"{sys.executable} runs {build} of gnsqlite: not the build asked")
        consume, publish = consume_rate, publish_rate
    else:
        consume, publish = CONSUME[client], PUBLISH[client]
    address, topic, count = spec["address"], spec["topic"], spec["count"]
    body = b"m" * BODY_SIZE

    def work() -> float:
        if spec["kind"] == "consume":
            return consume(address, topic, count, spec["param"], options)
        return publish(address, topic, body, count, spec["param"], options)

    profile = cProfile.Profile() if spec.get("profile") else None
    cpu = _cpu_seconds()
    if profile is not None:
        profile.enable()
    seconds = work()
    if profile is not None:
        profile.disable()
    cpu = _cpu_seconds() - cpu
    if profile is not None:
        profile.dump_stats(spec["profile"])
    return {"seconds": seconds, "messages": count, "cpu": cpu}


def run_memory_cell(spec: dict[str, Any]) -> dict[str, Any]:
    """A gnsqlite consumer or producer over ``count`` messages, RSS sampled every 0.2 s."""
    import gevent

    from gnsqlite.cli.bench import consume_rate, publish_rate

    samples: list[int] = []

    def sample() -> None:
        while True:
            samples.append(_rss_bytes())
            gevent.sleep(0.2)

    sampler = gevent.spawn(sample)
    gevent.sleep(0)
    address, topic, count = spec["address"], spec["topic"], spec["count"]
    try:
        if spec["kind"] == "consume":
            seconds = consume_rate(address, topic, count, 2500)
        else:
            seconds = publish_rate(address, topic, b"m" * BODY_SIZE, count, "pipelined")
    finally:
        sampler.kill()
    samples.append(_rss_bytes())
    # The first tenth of the run is warm-up (buffers, the worker pool) and not counted.
    warm = samples[max(1, len(samples) // 10)] if len(samples) > 2 else samples[0]
    return {
        "seconds": seconds,
        "messages": count,
        "rss_start": samples[0],
        "rss_after_warmup": warm,
        "rss_end": samples[-1],
        "rss_peak": max(samples),
        "growth": samples[-1] - warm,
    }


# -- the parent ---------------------------------------------------------------------------


def _proc_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) of process ``pid`` so far, from ``/proc``."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_idle(
    cpu: Callable[[], float],
    deadline: float,
    window: float = SETTLE_WINDOW,
    windows: int = SETTLE_IDLE_WINDOWS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Block until ``cpu()`` (CPU seconds so far) grew by at most one clock tick per
    ``window`` seconds, ``windows`` windows in a row; ``False`` if ``deadline`` came first."""
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    quiet = 0
    while quiet < windows:
        if clock() >= deadline:
            return False
        before = cpu()
        sleep(window)  # a sampling window: what is measured, not a guess at a delay
        quiet = quiet + 1 if cpu() - before <= tick + 1e-9 else 0
    return True


def run_child(
    script: str, argv: list[str], timeout: float, python: str | None = None
) -> dict[str, Any]:
    """Run ``script`` with ``argv`` in a fresh Python (``python``, default this one); the
    JSON of its last line of output.

    Blocks up to ``timeout`` seconds; a failure raises ``RuntimeError`` with its last words.
    """
    cmd = [python or sys.executable, os.path.abspath(script), *argv]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"no result within {timeout:.0f} s") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeError(f"exit {proc.returncode}: {last}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class Bench:
    """The parent: owns the nsqd, spawns one child per cell, collects the figures."""

    def __init__(self, args: argparse.Namespace, server: Any, ca_file: str | None) -> None:
        self.args = args
        self.server = server
        self.ca_file = ca_file
        self.address: str = server.tcp_address
        self.pid: int | None = server.process.pid if server.process is not None else None
        self.go_dir = server.bin_dir if server.is_real else os.environ.get("GNSQLITE_NSQD")
        self.run_id = f"{os.getpid()}"
        self.serial = 0
        self._deleted: list[str] = []  # topics deleted and not yet seen gone from /stats

    def _topic(self, row: Row, client: str) -> str:
        self.serial += 1
        return f"cmp_{row.key}_{client}_{self.run_id}_{self.serial}"

    def has_go(self) -> bool:
        return bool(self.go_dir) and os.path.exists(os.path.join(self.go_dir, "bench_reader"))

    def go_supports(self, row: Row) -> bool:
        if row.transport != "plain" or not self.has_go():
            return False
        if row.kind == "consume":
            return row.param != 1  # bench_reader flushes FINs by 3/4 of RDY: RDY 1 stalls
        return row.param in ("sequential", "mpub")

    @staticmethod
    def floor_supports(row: Row, client: str) -> bool:
        """The floor runs the latency-bound rows: sync PUB, MPUB and max_in_flight 1, plain.

        ``bare-handoff`` (a reader greenlet and a handler greenlet) is a consumer's floor only.
        """
        if client == "bare-handoff":
            return row.transport == "plain" and row.param == 1
        return row.transport == "plain" and row.param in (1, "sequential", "mpub")

    def count(self, row: Row) -> int:
        return row_count(row, self.args.messages)

    def _queue(self, topic: str, count: int) -> None:
        from gnsqlite.cli.bench import queue_messages

        queue_messages(self.address, topic, b"m" * BODY_SIZE, count)

    def _delete(self, topic: str) -> None:
        with contextlib.suppress(Exception):
            self.server.http.delete_topic(topic)
        self._deleted.append(topic)

    # -- settling ------------------------------------------------------------------------

    def settle(self) -> dict[str, Any]:
        """Block until nsqd is settled (see :data:`SETTLE_WINDOW`); returns how it went.

        Settled: the topics of earlier cells are gone from nsqd's ``/stats``;
        the real nsqd has run a garbage collection since (forced:
        ``/debug/pprof/heap?gc=1``), so a deleted topic's queues are not
        collected during the next cell; and nsqd's CPU was idle for
        :data:`SETTLE_IDLE_WINDOWS` windows in a row. Waits up to
        ``--settle-timeout`` seconds in all; ``settled`` says whether it got there.
        """
        start = time.monotonic()
        deadline = start + self.args.settle_timeout
        gone = self._wait_gone(deadline)
        heap = self._collect_garbage() if self.server.is_real else None
        idle = wait_idle(lambda: _proc_cpu(self.pid), deadline)
        return {
            "seconds": time.monotonic() - start,
            "settled": gone and idle,
            "heap_in_use": heap,
        }

    def _wait_gone(self, deadline: float) -> bool:
        """Block until no topic this bench deleted is in nsqd's ``/stats`` (or ``deadline``)."""
        while self._deleted:
            try:
                listed = {t["topic_name"] for t in self.server.http.stats().get("topics") or []}
            except Exception:
                listed = set(self._deleted)
            self._deleted = [t for t in self._deleted if t in listed]
            if not self._deleted:
                break
            if time.monotonic() >= deadline:
                return False
            time.sleep(SETTLE_WINDOW)
        return True

    def _collect_garbage(self) -> int | None:
        """Have the real nsqd run Go's garbage collector now; its heap in use after, in bytes."""
        base = f"http://{self.server.http_address}"
        try:
            with urllib.request.urlopen(f"{base}/debug/pprof/heap?gc=1&debug=1", timeout=30) as r:
                r.read()
            with urllib.request.urlopen(f"{base}/stats?format=json&include_mem=true") as r:
                memory = json.loads(r.read()).get("memory") or {}
        except OSError:
            return None
        heap = memory.get("heap_in_use_bytes")
        return int(heap) if heap is not None else None

    def cell(self, row: Row, client: str, profile: str | None = None) -> dict[str, Any]:
        """One run of ``client`` on ``row`` once nsqd settled; a failure is recorded, not raised."""
        topic = self._topic(row, client)
        if row.kind == "consume":  # queued first: settling waits for nsqd to be done with it
            go = client == "go"
            try:
                self._queue(
                    topic, self.args.go_messages if go else consume_backlog(self.count(row))
                )
            except Exception as exc:
                self._delete(topic)
                return {"error": f"queueing: {type(exc).__name__}: {exc}"[:300]}
        settle = self.settle()
        result = self._cell(row, client, topic, profile)
        result["settle"] = settle
        return result

    def _cell(self, row: Row, client: str, topic: str, profile: str | None) -> dict[str, Any]:
        try:
            if client == "go":
                return self._go_cell(row, topic)
            count = self.count(row)
            compiled = client == COMPILED
            spec = {
                "client": "gnsqlite" if compiled else client,
                "compiled": compiled,
                "kind": row.kind,
                "param": row.param,
                "transport": row.transport,
                "address": self.address,
                "topic": topic,
                "count": count,
                "ca_file": self.ca_file,
                "profile": profile,
            }
            nsqd_cpu = _proc_cpu(self.pid)
            python = self.args.compiled_python if compiled else None
            result = self._child(["--cell", json.dumps(spec)], self.args.cell_timeout, python)
            result["nsqd_cpu"] = _proc_cpu(self.pid) - nsqd_cpu
            return result
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"[:300]}
        finally:
            self._delete(topic)

    def _child(self, argv: list[str], timeout: float, python: str | None = None) -> dict[str, Any]:
        return run_child(__file__, argv, timeout, python)

    def _go_cell(self, row: Row, topic: str) -> dict[str, Any]:
        assert self.go_dir is not None
        runfor = self.args.go_runfor
        if row.kind == "consume":
            tool = [
                os.path.join(self.go_dir, "bench_reader"),
                f"--rdy={row.param}",
                "--channel=bench",
            ]
        else:
            batch = 1 if row.param == "sequential" else 100
            tool = [os.path.join(self.go_dir, "bench_writer"), f"--batch-size={batch}"]
        tool += [
            f"--nsqd-tcp-address={self.address}",
            f"--topic={topic}",
            f"--size={BODY_SIZE}",
            f"--runfor={runfor}s",
        ]
        nsqd_cpu = _proc_cpu(self.pid)
        result: dict[str, Any] = run_go_bench(tool, threads=1)  # one connection, one thread
        result["nsqd_cpu"] = _proc_cpu(self.pid) - nsqd_cpu
        if row.kind == "consume" and result["messages"] >= self.args.go_messages:
            result["note"] = "drained the topic: a lower bound"
        return result

    def memory(self, kind: str, count: int) -> dict[str, Any]:
        """gnsqlite's RSS over ``count`` messages (``kind`` consume or publish)."""
        try:
            return self._memory(kind, count)
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"[:300]}

    def _memory(self, kind: str, count: int) -> dict[str, Any]:
        row = Row(f"memory_{kind}", f"memory, {kind}", kind, None, "plain", 0)
        topic = self._topic(row, "gnsqlite")
        spec = {"kind": kind, "address": self.address, "topic": topic, "count": count}
        cmd = [sys.executable, os.path.abspath(__file__), "--memory-cell", json.dumps(spec)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        fed = 0
        try:
            # Keep nsqd's memory bounded: feed the consumer in chunks, empty
            # the producer's topic as it fills.
            while proc.poll() is None:
                if kind == "consume" and fed < count:
                    if self._depth(topic) < 200_000:
                        chunk = min(50_000, count - fed)
                        self._queue(topic, chunk)
                        fed += chunk
                        continue
                elif kind == "publish":
                    with contextlib.suppress(Exception):
                        self.server.http.empty_topic(topic)
                time.sleep(0.5)
            out, err = proc.communicate()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            self._delete(topic)
        if proc.returncode != 0:
            return {"error": (err.strip().splitlines() or ["?"])[-1]}
        return dict(json.loads(out.strip().splitlines()[-1]))

    def _depth(self, topic: str) -> int:
        try:
            stats = self.server.http.stats(topic=topic)
        except Exception:
            return 0
        for t in stats.get("topics") or []:  # nsqd says null, not [], for no topic
            if t["topic_name"] == topic:
                return int(t["depth"]) + sum(int(c["depth"]) for c in t.get("channels") or [])
        return 0


def run_go_bench(argv: list[str], threads: int) -> dict[str, Any]:
    """Run one of go-nsq's bench tools (``argv``) with ``GOMAXPROCS=threads``; blocks until
    it ends (its ``--runfor``).

    ``bench_reader`` opens one connection per ``GOMAXPROCS``, each with the
    whole ``--rdy``. Its figures: ``seconds`` (the run it timed),
    ``messages`` (its rate times that), ``cpu`` and ``sys_cpu`` (its user + system
    and system CPU seconds, start-up included) and ``wakeups`` (the times it slept
    waiting: voluntary context switches). Raises ``RuntimeError`` when it prints no
    figures.
    """
    env = {**os.environ, "GOMAXPROCS": str(threads)}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        _, _, usage = os.wait4(proc.pid, 0)
    finally:
        proc.returncode = 0
    assert proc.stderr is not None and proc.stdout is not None
    out = proc.stderr.read().decode() + proc.stdout.read().decode()
    proc.stderr.close()
    proc.stdout.close()
    found = re.search(r"duration: (\S+) - \S+ - ([\d.]+)ops/s", out)
    if not found:
        raise RuntimeError(f"no figures from {os.path.basename(argv[0])}: {out[-200:]!r}")
    seconds = _go_duration(found.group(1))
    return {
        "seconds": seconds,
        "messages": int(float(found.group(2)) * seconds),
        "cpu": usage.ru_utime + usage.ru_stime,
        "sys_cpu": usage.ru_stime,
        "wakeups": usage.ru_nvcsw,
    }


def _go_duration(text: str) -> float:
    """Go's ``time.Duration`` string (``1.000187s``, ``999.8ms``) in seconds."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    total = 0.0
    for number, unit in re.findall(r"([\d.]+)(ms|us|µs|ns|h|m|s)", text):
        total += float(number) * units[unit]
    return total


# -- summarising --------------------------------------------------------------------------


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and range of a cell's repetitions; CPU per message and CPU share."""
    good = [r for r in runs if "error" not in r]
    if not good:
        return {"error": runs[-1].get("error", "no run") if runs else "no run", "runs": runs}
    rates = [r["messages"] / r["seconds"] for r in good]
    cpu = [r["cpu"] / r["messages"] * 1e6 for r in good]
    nsqd = [r.get("nsqd_cpu", 0.0) / r["messages"] * 1e6 for r in good]
    share = [r["cpu"] / r["seconds"] for r in good]
    out = {
        "good_runs": len(good),
        "median": statistics.median(rates),
        "min": min(rates),
        "max": max(rates),
        "cpu_us_per_msg": statistics.median(cpu),
        "client_cpu_share": statistics.median(share),
        "nsqd_cpu_us_per_msg": statistics.median(nsqd),
        "runs": runs,
    }
    if len(good) < len(runs):
        out["failed_runs"] = len(runs) - len(good)
    notes = {r["note"] for r in good if "note" in r}
    if notes:
        out["note"] = "; ".join(sorted(notes))
    return out


def _cpu_ratio(
    cells: dict[str, dict[str, Any]], client: str | None, ours_is: str = "gnsqlite"
) -> float | None:
    """``ours_is``'s client CPU per message over ``client``'s in the same run (lower: better)."""
    ours = cells.get(ours_is, {})
    theirs = cells.get(client or "", {})
    if "median" not in ours or "median" not in theirs or not theirs.get("cpu_us_per_msg"):
        return None
    return float(ours["cpu_us_per_msg"]) / float(theirs["cpu_us_per_msg"])


def ratios(cells: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """gnsqlite's rate and client CPU per message as ratios to the best peer's and go-nsq's.

    Rate ratios (``vs_*``): higher is better; CPU ratios (``cpu_vs_*``): lower
    is better. The best peer is the Python peer with the highest rate; a ratio
    is ``None`` where either cell is missing (go-nsq has no row for that workload).
    """
    ours = cells.get("gnsqlite", {}).get("median")
    peers = {c: cells[c]["median"] for c in PEERS if "median" in cells.get(c, {})}
    best = max(peers, key=lambda c: peers[c]) if peers else None
    go = cells.get("go", {}).get("median")
    floor = cells.get(FLOORS[0], {}).get("median")
    handoff = cells.get("bare-handoff", {}).get("median")
    return {
        "best_peer": best,
        "vs_best_peer": ours / peers[best] if ours and best else None,
        "vs_go": ours / go if ours and go else None,
        # client CPU per message, gnsqlite's over theirs: lower is better
        "cpu_vs_best_peer": _cpu_ratio(cells, best),
        "cpu_vs_go": _cpu_ratio(cells, "go"),
        # gnsqlite's and the best peer's share of what a bare gevent socket reaches
        "of_floor": ours / floor if ours and floor else None,
        "peer_of_floor": peers[best] / floor if best and floor else None,
        # the same against a reader greenlet handing messages to a handler greenlet
        "of_handoff": ours / handoff if ours and handoff else None,
        "peer_of_handoff": peers[best] / handoff if best and handoff else None,
        # the compiled build's (--compiled-python): its rate and CPU over the pure build's and go's
        **_compiled_ratios(cells),
    }


def _compiled_ratios(cells: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    compiled = cells.get(COMPILED, {}).get("median")
    if not compiled:
        return {}
    pure = cells.get("gnsqlite", {}).get("median")
    go = cells.get("go", {}).get("median")
    floor = cells.get("bare-gevent", {}).get("median")
    return {
        "compiled_vs_pure": compiled / pure if pure else None,
        "compiled_cpu_vs_pure": _cpu_ratio(cells, "gnsqlite", COMPILED),
        "compiled_vs_go": compiled / go if go else None,
        "compiled_cpu_vs_go": _cpu_ratio(cells, "go", COMPILED),
        "compiled_of_floor": compiled / floor if floor else None,
    }


def compiled_table(report: dict[str, Any]) -> list[str]:
    """The compiled build beside the pure one, go-nsq and bare-gevent, with issue 40's verdicts."""
    lines = [
        "| workload | pure | compiled | compiled / pure: rate, CPU/msg"
        " | compiled / go: rate, CPU/msg | compiled / bare-gevent | target |",
        "|---" * 7 + "|",
    ]
    for row in ROWS:
        entry = report["rows"].get(row.key)
        if entry is None or COMPILED not in entry["cells"]:
            continue
        cells, r = entry["cells"], entry["ratios"]
        lines.append(
            f"| {row.title} | {_fmt_cell(cells.get('gnsqlite', {}))}"
            f" | {_fmt_cell(cells[COMPILED])}"
            f" | {_fmt_ratio(r.get('compiled_vs_pure'))},"
            f" {_fmt_ratio(r.get('compiled_cpu_vs_pure'))}"
            f" | {_fmt_ratio(r.get('compiled_vs_go'))}, {_fmt_ratio(r.get('compiled_cpu_vs_go'))}"
            f" | {_fmt_ratio(r.get('compiled_of_floor'))}"
            f" | {_compiled_verdict(row.key, cells, r)} |"
        )
    return lines


def _compiled_verdict(key: str, cells: dict[str, dict[str, Any]], r: dict[str, Any]) -> str:
    """A row's compiled-build targets: go's rate and CPU, or the bare round trip's rate."""
    want = COMPILED_GO_TARGETS.get(key)
    if want is not None:
        rate, cpu = r.get("compiled_vs_go"), r.get("compiled_cpu_vs_go")
        short = _short_of_runs(cells, "go", COMPILED)
        if rate is None or cpu is None:
            return "n/a"
        if short:
            return f"n/a ({short})"
        return (
            f"{'met' if rate >= want else 'NOT met'} (>= {want}x go),"
            f" {'met' if cpu <= 1 / want else 'NOT met'} (CPU <= {1 / want:.2f}x go's)"
        )
    least = COMPILED_FLOOR_TARGETS.get(key)
    if least is not None:
        share = r.get("compiled_of_floor")
        short = _short_of_runs(cells, "bare-gevent", COMPILED)
        if share is None:
            return "n/a"
        if short:
            return f"n/a ({short})"
        return f"{'met' if share >= least else 'NOT met'} (>= {least}x bare-gevent)"
    return "-"


def _runs(cell: dict[str, Any]) -> int:
    """How many runs a cell's medians are of (a report before ``good_runs``: its runs)."""
    return int(cell.get("good_runs", len(cell.get("runs") or [])))


def _met(row: Row, ratio: dict[str, Any], cells: dict[str, dict[str, Any]]) -> str:
    """The row's verdicts: each rate target (at least) and CPU target (at most).

    Each target is stated on the medians of :data:`MIN_RUNS` runs at least
    (``n/a`` below that), and on client CPU per message too, the steadier
    figure: a rate target of ``x`` times a client also reads "client CPU per
    message at most ``1/x`` times its", unless the row sets a CPU target
    against that client itself.
    """
    verdicts = []
    peer = ratio["best_peer"]
    named = {client for client, _ in row.cpu_targets}
    cpu_targets = list(row.cpu_targets)
    for want, got, what, client in zip(
        row.targets,
        (ratio["vs_best_peer"], ratio["vs_go"]),
        ("peer", "go"),
        (peer, "go"),
        strict=True,
    ):
        if want is None:
            continue
        short = _short_of_runs(cells, client)
        if got is None:
            verdicts.append(f"{what} n/a")
        elif short:
            verdicts.append(f"{what} n/a ({short})")
        else:
            verdicts.append(f"{'met' if got >= want else 'NOT met'} (>= {want}x {what})")
        if client is not None and client not in named:
            cpu_targets.append((client, round(1 / want, 2)))
    for client, most in cpu_targets:
        cpu = _cpu_ratio(cells, client)
        short = _short_of_runs(cells, client)
        if cpu is None:
            verdicts.append(f"CPU vs {client} n/a")
        elif short:
            verdicts.append(f"CPU vs {client} n/a ({short})")
        else:
            verdicts.append(f"{'met' if cpu <= most else 'NOT met'} (CPU <= {most}x {client}'s)")
    return ", ".join(verdicts)


def _short_of_runs(
    cells: dict[str, dict[str, Any]], client: str | None, ours_is: str = "gnsqlite"
) -> str:
    """Why ``ours_is``'s and ``client``'s medians are too few runs to judge on, or ``""``."""
    runs = min(_runs(cells.get(ours_is, {})), _runs(cells.get(client or "", {})))
    return f"{runs} runs < {MIN_RUNS}" if runs < MIN_RUNS else ""


def _fmt_rate(cell: dict[str, Any]) -> str:
    if "median" not in cell:
        return "failed" if cell.get("error") else "-"
    return f"{cell['median']:,.0f} ({cell['min'] / 1000:,.0f}k-{cell['max'] / 1000:,.0f}k)"


def _fmt_cell(cell: dict[str, Any]) -> str:
    """A client's cell of the main table: its rate, then its CPU per message beside nsqd's."""
    if "median" not in cell:
        return _fmt_rate(cell)
    return f"{_fmt_rate(cell)}, {cell['cpu_us_per_msg']:.2f} / {cell['nsqd_cpu_us_per_msg']:.2f} µs"


def _fmt_ratio(value: float | None) -> str:
    return f"{value:.2f}x" if value else "-"


def rate_table(report: dict[str, Any]) -> list[str]:
    """The main table as markdown lines: rates, and gnsqlite's rate and CPU ratios."""
    clients = report["clients"]
    lines = [
        "| workload | " + " | ".join(clients) + " | vs best peer | vs go"
        " | CPU/msg vs best peer | CPU/msg vs go | target |",
        "|---" * (len(clients) + 6) + "|",
    ]
    for row in ROWS:
        entry = report["rows"].get(row.key)
        if entry is None:
            continue
        cells = [_fmt_cell(entry["cells"].get(c, {})) for c in clients]
        r = entry["ratios"]
        peer = f"{_fmt_ratio(r['vs_best_peer'])} ({r['best_peer']})" if r["vs_best_peer"] else "-"
        cpu = _fmt_ratio(r.get("cpu_vs_best_peer"))
        cpu_peer = f"{cpu} ({r['best_peer']})" if cpu != "-" else "-"
        lines.append(
            f"| {row.title} | " + " | ".join(cells) + f" | {peer} | {_fmt_ratio(r['vs_go'])}"
            f" | {cpu_peer} | {_fmt_ratio(r.get('cpu_vs_go'))} | {entry['met']} |"
        )
    return lines


def settle_summary(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """What settling nsqd before each run took (the ``settle`` of every run's result)."""
    runs = [c["settle"] for c in cells if "settle" in c]
    if not runs:
        return {}
    heaps = [r["heap_in_use"] for r in runs if r.get("heap_in_use") is not None]
    return {
        "runs": len(runs),
        "unsettled": sum(1 for r in runs if not r["settled"]),
        "median_seconds": statistics.median(r["seconds"] for r in runs),
        "max_seconds": max(r["seconds"] for r in runs),
        "median_heap_in_use": statistics.median(heaps) if heaps else None,
    }


def settle_line(summary: dict[str, Any]) -> str:
    """One line saying how settling went."""
    heap = summary.get("median_heap_in_use")
    garbage = f"; nsqd's heap after its GC {heap / 2**20:.1f} MiB (median)" if heap else ""
    return (
        f"nsqd settled before each of {summary['runs']} runs: median"
        f" {summary['median_seconds']:.2f} s, at most {summary['max_seconds']:.2f} s;"
        " not settled within --settle-timeout:"
        f" {summary['unsettled']}{garbage}"
    )


def rederive(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with every row's ratios and verdict computed again from its cells.

    A report written by an older compare.py (``--json``) lacks the newer ratios
    (the CPU ratios); its cells hold every figure they are made from.
    """
    for row in ROWS:
        entry = report["rows"].get(row.key)
        if entry is not None:
            entry["ratios"] = ratios(entry["cells"])
            entry["met"] = _met(row, entry["ratios"], entry["cells"])
    return report


def print_table(report: dict[str, Any]) -> None:
    clients = report["clients"]
    print()
    print("\n".join(rate_table(report)))
    print(
        f"\nmsg/s: median (range) of the repetitions (at least {MIN_RUNS} for a verdict);"
        " higher is better;\nthen client / nsqd CPU µs per message (medians; nsqd's from"
        " /proc/<pid>/stat). CPU/msg: gnsqlite's\nclient CPU per message over the best peer's"
        " and go-nsq's in the same run (medians); lower is better.\n"
    )
    settle = report.get("settle")
    if settle:
        print(settle_line(settle) + "\n")
    print("| workload (CPU µs per message: client / nsqd) | " + " | ".join(clients) + " |")
    print("|---" * (len(clients) + 1) + "|")
    for row in ROWS:
        entry = report["rows"].get(row.key)
        if entry is None:
            continue
        cells = []
        for c in clients:
            cell = entry["cells"].get(c, {})
            if "median" in cell:
                cells.append(
                    f"{cell['cpu_us_per_msg']:.2f} ({cell['client_cpu_share']:.0%})"
                    f" / {cell['nsqd_cpu_us_per_msg']:.2f}"
                )
            else:
                cells.append("-")
        print(f"| {row.title} | " + " | ".join(cells) + " |")
    print("\nclient CPU µs/msg (client CPU as a share of one core) / nsqd CPU µs/msg.")
    if COMPILED in clients:
        print("\nThe compiled build (--compiled-python), medians of the same runs:\n")
        print("\n".join(compiled_table(report)))
    print_floor_table(report)
    for kind, mem in report.get("memory", {}).items():
        if "error" in mem:
            print(f"memory, {kind}: failed: {mem['error']}")
            continue
        print(
            f"memory, {kind} over {mem['messages']:,} messages: RSS {mem['rss_start'] / 2**20:.1f}"
            f" MiB at start, {mem['rss_after_warmup'] / 2**20:.1f} after warm-up,"
            f" {mem['rss_end'] / 2**20:.1f} at the end (peak {mem['rss_peak'] / 2**20:.1f}):"
            f" growth {mem['growth'] / 2**20:+.1f} MiB"
            f" ({'met' if mem['growth'] < 10 * 2**20 else 'NOT met'}: < 10 MiB)"
        )


def print_floor_table(report: dict[str, Any]) -> None:
    """The latency-bound rows against the same round trips with no library (floor.py)."""
    floors = report.get("floors") or []
    shown = [
        (row, report["rows"][row.key])
        for row in ROWS
        if row.key in report["rows"]
        and any("median" in report["rows"][row.key]["cells"].get(f, {}) for f in floors)
    ]
    if not shown:
        return
    print("\n| workload: the floor | gnsqlite | best peer | " + " | ".join(floors), end="")
    print(" | gnsqlite / bare-gevent | best peer / bare-gevent | peer target / bare-gevent", end="")
    print(" | gnsqlite / bare-handoff | best peer / bare-handoff |")
    print("|---" * (len(floors) + 8) + "|")
    for row, entry in shown:
        cells, r = entry["cells"], entry["ratios"]

        def rate(cell: dict[str, Any]) -> str:
            if "median" not in cell:
                return "-"
            return f"{cell['median']:,.0f} ({cell['cpu_us_per_msg']:.1f} µs)"

        peer = f"{rate(cells.get(r['best_peer'] or '', {}))} {r['best_peer'] or ''}".strip()
        target = row.targets[0]
        needed = f"{target * r['peer_of_floor']:.2f}" if target and r["peer_of_floor"] else "-"
        of_floor = f"{r['of_floor']:.2f}" if r["of_floor"] else "-"
        peer_of = f"{r['peer_of_floor']:.2f}" if r["peer_of_floor"] else "-"
        handoff = " | ".join(
            f"{r[key]:.2f}" if r.get(key) else "-" for key in ("of_handoff", "peer_of_handoff")
        )
        print(
            f"| {row.title} | {rate(cells.get('gnsqlite', {}))} | {peer} | "
            + " | ".join(rate(cells.get(f, {})) for f in floors)
            + f" | {of_floor} | {peer_of} | {needed} | {handoff} |"
        )
    print(
        "\nmsg/s median (client CPU µs/msg). bare-gevent: one greenlet, one send, gevent's wait,"
        " one recv per round trip;\nbare-socket: a blocking socket, no event loop; bare-handoff:"
        " a reader greenlet hands each message\nto a handler greenlet through a gevent queue."
        " A target above 1.00x bare-gevent asks a client for more than the bare round trip."
    )


def plot(report: dict[str, Any], path: str) -> None:
    """A grouped bar chart of the table (log scale, bars at the median, whiskers the range)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in ROWS if row.key in report["rows"]]
    clients = report["clients"]
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(rows) * len(clients) / 2 + 2))
    height = 0.8 / len(clients)
    for i, client in enumerate(clients):
        ys, xs, lo, hi = [], [], [], []
        for j, row in enumerate(rows):
            cell = report["rows"][row.key]["cells"].get(client, {})
            if "median" in cell:
                ys.append(j + i * height)
                xs.append(cell["median"])
                lo.append(cell["median"] - cell["min"])
                hi.append(cell["max"] - cell["median"])
        ax.barh(ys, xs, height=height, xerr=[lo, hi], label=client, capsize=2)
    ax.set_yticks([j + 0.4 - height / 2 for j in range(len(rows))])
    ax.set_yticklabels([row.title for row in rows])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("messages per second (log scale; median, whiskers: range)")
    ax.set_title(f"{report['broker']}, {report['repeat']} repetitions, 100-byte messages", pad=26)
    # Above the bars, under the title: inside the axes it covers the last rows' bars.
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(clients), frameon=False)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


# -- main ---------------------------------------------------------------------------------


def _mem_queue_size(args: argparse.Namespace) -> int:
    """Room for the largest backlog a run queues: Go's, or a consume row's."""
    consume = (consume_backlog(row_count(r, args.messages)) for r in ROWS if r.kind == "consume")
    return max(MEM_QUEUE_SIZE, args.go_messages, *consume)


@contextlib.contextmanager
def _server(args: argparse.Namespace) -> Iterator[tuple[Any, str | None]]:
    from gnsqlite.testing import NsqdServer
    from gnsqlite.testing.tls import make_tls_files

    with tempfile.TemporaryDirectory(prefix="gnsqlite-compare-") as tmp:
        tls = None
        options: dict[str, Any] = {"mem_queue_size": _mem_queue_size(args)}
        try:
            tls = make_tls_files(tmp)
            options.update(tls_cert=tls.cert_file, tls_key=tls.key_file)
        except ImportError:
            print("trustme is not installed: no TLS rows")
        with NsqdServer(**options) as server:
            yield server, tls.ca_file if tls else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--repeat",
        type=int,
        default=MIN_RUNS,
        help=f"repetitions (default {MIN_RUNS}: targets are judged on {MIN_RUNS} at least)",
    )
    parser.add_argument(
        "--settle-timeout",
        type=float,
        default=30.0,
        help="seconds to wait for nsqd to settle before each run (default 30)",
    )
    parser.add_argument(
        "--messages",
        type=int,
        default=100_000,
        help="base messages per run; each workload scales it (default 100,000)",
    )
    parser.add_argument(
        "--rows", default="", help=f"comma-separated subset of: {','.join(r.key for r in ROWS)}"
    )
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument(
        "--compiled-python",
        metavar="PYTHON",
        help="a Python with gnsqlite's compiled build installed (GNSQLITE_COMPILE=1 pip install .)"
        f": adds the {COMPILED} column, run by it, and its table",
    )
    parser.add_argument("--go-runfor", type=float, default=1.0, help="seconds per Go run")
    parser.add_argument(
        "--go-messages",
        type=int,
        default=800_000,
        help="messages queued for bench_reader (must outlast --go-runfor)",
    )
    parser.add_argument("--cell-timeout", type=float, default=60.0, help="seconds per run")
    parser.add_argument(
        "--memory-messages",
        type=int,
        default=0,
        help="add the memory rows over N messages (the target: 5,000,000)",
    )
    parser.add_argument(
        "--no-floor",
        dest="floor",
        action="store_false",
        help="skip the bare-socket runs of the latency-bound rows (floor.py)",
    )
    parser.add_argument("--json", metavar="PATH", help="write the report as JSON")
    parser.add_argument("--plot", metavar="PATH", help="write the table as a PNG (matplotlib)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile gnsqlite's cells (cProfile) instead of comparing",
    )
    parser.add_argument(
        "--tables-from",
        metavar="PATH",
        help="print the tables of a report written by --json (ratios computed again), run nothing",
    )
    parser.add_argument("--cell", help=argparse.SUPPRESS)
    parser.add_argument("--memory-cell", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cell:
        print(json.dumps(run_cell(json.loads(args.cell))))
        return 0
    if args.memory_cell:
        print(json.dumps(run_memory_cell(json.loads(args.memory_cell))))
        return 0
    if args.tables_from:
        with open(args.tables_from) as f:
            print_table(rederive(json.load(f)))
        return 0
    wanted = {k for k in args.rows.split(",") if k}
    rows = [r for r in ROWS if not wanted or r.key in wanted]
    unknown = wanted - {r.key for r in ROWS}
    if unknown:
        parser.error(f"unknown rows: {', '.join(sorted(unknown))}")
    with _server(args) as (server, ca_file):
        bench = Bench(args, server, ca_file)
        if ca_file is None:
            rows = [r for r in rows if r.transport != "tls"]
        if args.profile:
            return _profile(bench, rows)
        clients = [c for c in args.clients.split(",") if c in CLIENTS]
        if args.compiled_python:
            clients.insert(clients.index("gnsqlite") + 1 if "gnsqlite" in clients else 0, COMPILED)
        if "go" in clients and not bench.has_go():
            print("go-nsq's bench_reader/bench_writer not found (GNSQLITE_NSQD): no Go row")
            clients.remove("go")
        report = _compare(bench, rows, clients)
    print_table(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {args.json}")
    if args.plot:
        plot(report, args.plot)
        print(f"wrote {args.plot}")
    return 0


def _compare(bench: Bench, rows: list[Row], clients: list[str]) -> dict[str, Any]:
    args = bench.args
    broker = "real nsqd" if bench.server.is_real else "embedded broker"
    uptime_before = _loadavg()
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {broker} at {bench.address};"
        f" load average {uptime_before}; {args.repeat} repetitions",
        flush=True,
    )
    everyone = clients + (list(FLOORS) if args.floor else [])
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        r.key: {c: [] for c in everyone} for r in rows
    }
    gone = ""  # why nsqd is no longer there: the cells left would all fail
    for rep in range(args.repeat):
        order = everyone[rep % len(everyone) :] + everyone[: rep % len(everyone)]
        for row in rows:
            for client in order:
                if gone:
                    break
                if client == "go" and not bench.go_supports(row):
                    continue
                if client in FLOORS and not bench.floor_supports(row, client):
                    continue
                result = bench.cell(row, client)
                runs[row.key][client].append(result)
                shown = (
                    f"{result['messages'] / result['seconds']:,.0f} msg/s"
                    if "error" not in result
                    else f"failed: {result['error']}"
                )
                print(
                    f"  [{rep + 1}/{args.repeat}] {row.title:<28} {client:<17} {shown}", flush=True
                )
                if "error" in result:
                    gone = server_gone(bench.server)
    if gone:
        print(f"stopped: {gone}; the tables count the runs made before", flush=True)
    report: dict[str, Any] = {
        "broker": broker,
        "python": sys.version.split()[0],
        "cores": os.cpu_count(),
        "repeat": args.repeat,
        "messages": args.messages,
        "clients": clients,
        "floors": [f for f in FLOORS if f in everyone],
        "load_before": uptime_before,
        "rows": {},
    }
    for row in rows:
        cells = {c: summarise(r) for c, r in runs[row.key].items() if r}
        ratio = ratios(cells)
        report["rows"][row.key] = {
            "title": row.title,
            "count": bench.count(row),
            "cells": cells,
            "ratios": ratio,
            "met": _met(row, ratio, cells),
        }
    if args.memory_messages:
        print_table(report)  # the table first: the memory rows take a while
        report["memory"] = {}
        for kind in ("consume", "publish"):
            report["memory"][kind] = bench.memory(kind, args.memory_messages)
            print(f"  memory, {kind}: {report['memory'][kind]}", flush=True)
    report["settle"] = settle_summary(
        [result for row in runs.values() for cell in row.values() for result in cell]
    )
    report["load_after"] = _loadavg()
    print(f"load average before {uptime_before}, after {report['load_after']}")
    return report


def server_gone(server: Any) -> str:
    """Why ``server`` (an ``NsqdServer``) stopped, with the end of its output; ``""`` if it runs."""
    process = server.process
    if process is None or process.exit_status is None:
        return ""
    output = server.stderr_text().strip()[-1500:] or "(nothing)"
    return f"nsqd exited with status {process.exit_status}; the end of its output:\n{output}"


def _profile(bench: Bench, rows: list[Row]) -> int:
    with tempfile.TemporaryDirectory(prefix="gnsqlite-profile-") as tmp:
        for row in rows:
            path = os.path.join(tmp, f"{row.key}.prof")
            result = bench.cell(row, "gnsqlite", profile=path)
            if "error" in result:
                print(f"{row.title}: failed: {result['error']}")
                continue
            print(
                f"\n== {row.title}: {result['messages'] / result['seconds']:,.0f} msg/s under"
                f" the profiler, {result['cpu'] / result['messages'] * 1e6:.2f} µs CPU/msg"
            )
            pstats.Stats(path).sort_stats("tottime").print_stats(18)
    return 0


if __name__ == "__main__":
    sys.exit(main())
