"""Spark connector throughput against the bare client on the same nsqd (not a test).

Prints, in one run on one nsqd with its default flags:

* the bare ``gnsqlite.Consumer`` draining ``--messages`` messages
  (max_in_flight 2500), and the ``nsq`` streaming source reading as many
  from the same nsqd in each of ``--pipelines`` (by default
  ``readOn=executors`` on ``local-cluster[2,1,1024]`` and on ``local[2]``,
  and ``readOn=driver`` with a WAL; ``--no-wal`` adds the source without
  one), as a ratio of the bare consumer, ``--repeat`` pairs (the median
  ratio). Two figures: with the query's start-up (from ``query.start()``)
  and from the source's subscription (when nsqd first lists a connection
  of the pipeline, where the bare consumer's clock effectively starts);
  and the Python CPU per row: the CPU seconds of this process (the
  driver's Python) and of every Python process below it (the source's
  process, the executors' Python workers; read from ``/proc``, reaped
  workers through their parent's ``cutime``) over the run, per row, as a
  ratio of the bare consumer's CPU per message; beside each, nsqd's own
  CPU per message. Every consumer starts from the same state: its backlog
  filed in an existing channel (:func:`backlog`), as a consumer of a
  standing channel finds it;
* with ``--executor-read K,K,...``: the executors' read path without Spark
  (:func:`gnsqlite.spark.executor_read.read_share`, segment write and FIN
  included) in K processes at once, against 1 and 3 nsqd: the summed rate,
  to see where it stops growing;
* one ``Producer``'s MPUB rate (1,000 messages per MPUB) for ``--rows``
  messages, and the batch sink (``df.write.format("nsq")``) writing as
  many rows, as a ratio of the Producer.

Messages are 100 bytes. Runs an embedded nsqd, or the real one when
``GNSQLITE_NSQD`` names the directory of its binaries, and ``local[2]``
(``--master`` to change); a short warm-up runs first so the JVM's own
start-up is not counted. Needs ``gnsqlite[spark]`` and Java 17::

    GNSQLITE_NSQD=/path/to/nsq/bin python benchmarks/bench_spark.py \\
        --rows 500000 --messages 1000000 --repeat 3
    GNSQLITE_NSQD=/path/to/nsq/bin python benchmarks/bench_spark.py --executor-read 1,2,4 \\
        --messages 400000
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from typing import Any, NamedTuple

import gevent
import gevent.event

from gnsqlite.consumer import Consumer
from gnsqlite.http import NsqdHTTPClient
from gnsqlite.message import Message
from gnsqlite.producer import Producer
from gnsqlite.testing import NsqdServer, nsq_bin_dir, wait_until

BODY = b"x" * 100

#: The pipelines ``--pipelines`` names: (master, source options besides the WAL).
PIPELINES: dict[str, tuple[str, dict[str, str]]] = {
    "executors-cluster": ("local-cluster[2,1,1024]", {"readOn": "executors"}),
    "executors-local": ("local[2]", {"readOn": "executors"}),
    "driver-wal": ("local[2]", {"readOn": "driver"}),
    "driver-nowal": ("local[2]", {"readOn": "driver"}),
}


def _proc_cpu(pid: int) -> tuple[int, float] | None:
    """(parent pid, utime + stime + cutime + cstime in seconds) of ``pid``; None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[1]), sum(int(x) for x in fields[11:15]) / ticks


def nsqd_cpu(server: NsqdServer) -> float:
    """CPU seconds nsqd's process has used so far (0.0 once it is gone)."""
    pid = server.process.pid if server.process is not None else None
    got = _proc_cpu(pid) if pid is not None else None
    return got[1] if got is not None else 0.0


def python_cpu() -> float:
    """CPU seconds of this process and of every Python process below it (``/proc``).

    This process counts by ``getrusage`` (its threads; not its children);
    each Python descendant by its own and its reaped children's times, so a
    Python worker that ended inside a pyspark daemon still counts.
    """
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    total = own.ru_utime + own.ru_stime
    procs = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            got = _proc_cpu(int(name))
            if got is not None:
                procs[int(name)] = got
    me = os.getpid()
    for pid, (_, cpu) in procs.items():
        if pid == me:
            continue
        ancestor, python = pid, False
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                python = b"python" in f.read().split(b"\0", 1)[0]
        except OSError:
            continue
        while python and ancestor > 1 and ancestor != me:
            ancestor = procs.get(ancestor, (1, 0.0))[0]
        if python and ancestor == me:
            total += cpu
    return total


def _role(cmdline: list[str]) -> str:
    """What a Python process below this one does in a Spark run, from its command line."""
    args = " ".join(cmdline[1:])
    if "pyspark.daemon" in args and args.rstrip().endswith("pyspark.worker"):
        return "executors' Python workers"
    if "python_streaming_source_runner" in args:
        return "the source's process (driver)"
    if "pyspark.sql.worker" in args or "pyspark.daemon" in args:
        return "Spark's planning workers (driver)"
    return "other Python"


class ProcessCpu:
    """Each Python process's CPU over a run, by role, from ``/proc`` (a sampling thread).

    :meth:`start` records every Python process below this one and starts a
    thread that reads their CPU (their own, not their children's) every
    ``interval`` seconds, so a process that ends meanwhile keeps its last
    reading (at most ``interval`` s of its CPU is lost); :meth:`stop` ends
    the thread and returns the CPU seconds used since :meth:`start` by
    role, this process (the driver's Python) included.
    """

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self._first: dict[int, float] = {}
        self._last: dict[int, tuple[str, float]] = {}
        self._own = 0.0
        self._roles: dict[int, str] = {}
        self.sampling = 0.0  # the sampling thread's own CPU seconds, not the driver's
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> dict[int, tuple[str, float]]:
        me = os.getpid()
        ticks = os.sysconf("SC_CLK_TCK")
        parents: dict[int, int] = {}
        stats: dict[int, float] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(name)] = int(fields[1])
            stats[int(name)] = (int(fields[11]) + int(fields[12])) / ticks
        out = {}
        for pid, cpu in stats.items():
            ancestor = parents[pid]
            while ancestor > 1 and ancestor != me:
                ancestor = parents.get(ancestor, 1)
            if ancestor != me:
                continue
            role = self._roles.get(pid)
            if role is None:
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmdline = [a.decode() for a in f.read().split(b"\0")]
                except OSError:
                    continue
                role = self._roles[pid] = _role(cmdline) if "python" in cmdline[0] else ""
            if role:
                out[pid] = (role, cpu)
        return out

    def _run(self) -> None:
        while not self._done.wait(self.interval):
            self._last.update(self._sample())
        self.sampling = time.thread_time()

    def start(self) -> None:
        import resource

        first = self._sample()
        self._first = {pid: cpu for pid, (_, cpu) in first.items()}
        self._last = dict(first)
        own = resource.getrusage(resource.RUSAGE_SELF)
        self._own = own.ru_utime + own.ru_stime
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, float]:
        import resource

        self._done.set()
        if self._thread is not None:
            self._thread.join()
        self._last.update(self._sample())
        own = resource.getrusage(resource.RUSAGE_SELF)
        driver = own.ru_utime + own.ru_stime - self._own - self.sampling
        roles = {"the driver's Python (foreachBatch)": driver}
        for pid, (role, cpu) in self._last.items():
            roles[role] = roles.get(role, 0.0) + cpu - self._first.get(pid, 0.0)
        return roles


def publish(server: NsqdServer, topic: str, count: int) -> float:
    """MPUB ``count`` 100-byte messages with one Producer; returns messages per second."""
    with Producer(server.tcp_address) as producer:
        chunk = [BODY] * 1000
        started = time.perf_counter()
        for start in range(0, count, 1000):
            producer.multi_publish(topic, chunk[: min(1000, count - start)])
        return count / (time.perf_counter() - started)


def backlog(server: NsqdServer, topic: str, count: int) -> None:
    """``count`` messages queued in channel ``bench`` of ``topic``, as a consumer finds a backlog.

    The channel is made before the publish, and this returns once nsqd has
    filed every message in it (``depth`` == ``count``: beyond nsqd's
    ``--mem-queue-size``, in its disk queue). So each consumer measured
    starts from the same state and none pays for nsqd's copying of a
    topic's messages into a channel made late (a consumer that creates the
    channel as it subscribes would take the copies from memory as nsqd
    makes them, and one that starts later would read them from disk).
    """
    http = NsqdHTTPClient(server.http_address)
    http.create_topic(topic)
    http.create_channel(topic, "bench")
    publish(server, topic, count)
    wait_until(
        lambda: server.channel_stats(topic, "bench").get("depth") == count,
        timeout=300,
        interval=0.05,
        message=f"nsqd filed {count} messages in {topic}/bench",
    )


def bench_consumer(server: NsqdServer, topic: str, messages: int) -> tuple[float, float, float]:
    """A bare Consumer draining ``messages``: (messages per second, CPU seconds per
    message, nsqd's CPU seconds per message)."""
    seen = [0]
    done = gevent.event.Event()

    def handle(message: Message) -> None:
        seen[0] += 1
        if seen[0] >= messages:
            done.set()

    consumer = Consumer(
        topic, "bench", handle, nsqd_tcp_addresses=[server.tcp_address], max_in_flight=2500
    )
    cpu = python_cpu()
    broker = nsqd_cpu(server)
    started = time.perf_counter()
    consumer.start()
    try:
        if not done.wait(600):
            raise TimeoutError(f"the consumer got {seen[0]} of {messages} messages")
        elapsed = time.perf_counter() - started
        return (
            messages / elapsed,
            (python_cpu() - cpu) / messages,
            (nsqd_cpu(server) - broker) / messages,
        )
    finally:
        consumer.close(5.0)


def bench_sink(spark: Any, server: NsqdServer, rows: int) -> float:
    df = spark.range(rows).selectExpr("concat('row-', lpad(id, 10, '0'), repeat('x', 86)) as body")
    df = df.cache()
    df.count()
    started = time.perf_counter()
    (
        df.write.format("nsq")
        .option("nsqdTcpAddresses", server.tcp_address)
        .option("topic", "bench_sink")
        .mode("append")
        .save()
    )
    elapsed = time.perf_counter() - started
    df.unpersist()
    return rows / elapsed


class SourceRun(NamedTuple):
    """One run of the streaming source over a backlog."""

    with_startup: float  # rows/s from query.start() until the last row reached foreachBatch
    subscribed: float  # rows/s from the source's subscription at nsqd until the last row
    startup: float  # seconds from query.start() until the source subscribed
    batches: int
    cpu_per_row: float  # Python CPU seconds (driver and executors) per row
    cpu_split: dict[str, float]  # with --cpu-split: CPU seconds by process role, else empty
    nsqd_cpu_per_row: float  # nsqd's CPU seconds per row, from query.start()


def bench_source(
    spark: Any,
    server: NsqdServer,
    topic: str,
    messages: int,
    per_batch: int,
    extra: dict[str, str] | None = None,
    wal: bool = True,
    split: bool = False,
) -> SourceRun:
    """The source (with a WAL unless ``wal`` is false) reading ``messages`` published before.

    The clock starts at ``query.start()`` (start-up included: the query, the
    source's Python process, its connection) and, for the second figure, when
    nsqd first lists the source's connection on the channel, which is where a
    bare Consumer's clock effectively starts too.
    """
    seen = [0]
    batches = [0]
    lock = threading.Lock()

    def count(df: Any, batch_id: int) -> None:
        n = df.count()
        with lock:
            seen[0] += n
            batches[0] += 1 if n else 0

    scratch = tempfile.mkdtemp(prefix="bench-spark-")
    sampler = ProcessCpu() if split else None
    if sampler is not None:
        sampler.start()
    cpu = python_cpu()
    broker = nsqd_cpu(server)
    started = time.perf_counter()
    wal_option = {"walLocation": os.path.join(scratch, "wal")} if wal else {}
    http = {"nsqdHttpAddresses": server.http_address}
    query = (
        spark.readStream.format("nsq")
        .option("nsqdTcpAddresses", server.tcp_address)
        .options(**http)
        .option("topic", topic)
        .option("channel", "bench")
        .options(**wal_option)
        .option("maxMessagesPerBatch", per_batch)
        .options(**(extra or {}))
        .load()
        .writeStream.foreachBatch(count)
        .option("checkpointLocation", os.path.join(scratch, "ck"))
        .start()
    )
    try:
        wait_until(
            lambda: server.channel_stats(topic, "bench").get("clients"),
            timeout=120,
            interval=0.02,
            message="the source subscribed",
        )
        subscribed = time.perf_counter()
        wait_until(lambda: seen[0] >= messages, timeout=900, interval=0.02)
        done = time.perf_counter()
        roles = sampler.stop() if sampler is not None else {}
        used = python_cpu() - cpu - (sampler.sampling if sampler is not None else 0.0)
        broker = nsqd_cpu(server) - broker
    finally:
        query.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return SourceRun(
        messages / (done - started),
        messages / (done - subscribed),
        subscribed - started,
        batches[0],
        used / messages,
        roles,
        broker / messages,
    )


def _read_shares(args: tuple[Any, ...]) -> tuple[int, bool, float]:
    """One process of the executor-read benchmark: (rows read, started late, CPU seconds)."""
    from gnsqlite.spark.executor_read import NSQSharePartition, read_share

    options, shares, start = args
    late = time.time() > start
    while time.time() < start:  # every process starts reading at once
        time.sleep(0.001)
    cpu = time.process_time()
    rows = 0
    for batch, index, nsqd, share in shares:
        part = NSQSharePartition(index, batch, nsqd, share, options)
        rows += sum(b.num_rows for b in read_share(part))
    return rows, late, time.process_time() - cpu


def bench_executor_read(
    servers: list[NsqdServer], processes: int, messages: int, share: int
) -> tuple[float, float]:
    """``processes`` processes reading ``messages`` (over ``servers``) in shares.

    Returns (rows per second summed, CPU seconds per row of the reading processes).
    """
    import multiprocessing

    from gnsqlite.spark.options import parse_source_options

    topic = f"bench_exec_{len(servers)}_{processes}"
    scratch = tempfile.mkdtemp(prefix="bench-exec-read-")
    per_server = messages // len(servers)
    for server in servers:
        backlog(server, topic, per_server)
    options = parse_source_options(
        {
            "nsqdTcpAddresses": ",".join(s.tcp_address for s in servers),
            "nsqdHttpAddresses": ",".join(s.http_address for s in servers),
            "topic": topic,
            "channel": "bench",
            "readOn": "executors",
            "walLocation": os.path.join(scratch, "wal"),
            "readIdleTimeout": "0.5",
        }
    )
    shares = [
        (b, i, s.tcp_address, share)
        for i, s in enumerate(servers)
        for b in range(-(-per_server // share))
    ]
    plans: list[list[Any]] = [[] for _ in range(processes)]
    for n, item in enumerate(shares):
        plans[n % processes].append(item)
    context = multiprocessing.get_context("spawn")
    try:
        with context.Pool(processes) as pool:
            start = time.time() + 8.0  # the spawned processes import pyarrow, gevent, pyspark
            result = pool.map_async(_read_shares, [(options, p, start) for p in plans])
            outcomes = result.get(900)
            elapsed = time.time() - start
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rows = sum(r for r, _, _ in outcomes)
    if any(late for _, late, _ in outcomes):
        print("  (a process was not ready at the start: the figure includes its start-up)")
    if rows < messages - messages % len(servers):
        raise RuntimeError(f"read {rows} of {messages} rows")
    return rows / elapsed, sum(c for _, _, c in outcomes) / rows


def run_executor_read(counts: list[int], messages: int, share: int) -> None:
    print(f"executor read path without Spark, {messages} messages, shares of {share}:")
    for nsqd in (1, 3):
        servers = [NsqdServer() for _ in range(nsqd)]
        try:
            for server in servers:
                server.start()
            for k in counts:
                rate, cpu = bench_executor_read(servers, k, messages, share)
                print(
                    f"  {nsqd} nsqd, K={k} processes: {rate:>10,.0f} rows/s summed,"
                    f" {cpu * 1e6:.2f} us CPU per row",
                    flush=True,
                )
        finally:
            for server in servers:
                server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000, help="rows for the batch sink")
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages per source run")
    parser.add_argument("--per-batch", type=int, default=100_000, help="maxMessagesPerBatch")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="consumer/source pairs; the ratios' median is reported",
    )
    parser.add_argument(
        "--pipelines",
        default="executors-cluster,executors-local,driver-wal",
        help=f"comma-separated, of {', '.join(PIPELINES)}",
    )
    parser.add_argument(
        "--source-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another option of the source (e.g. walBatchDelay=0)",
    )
    parser.add_argument("--no-sink", action="store_true", help="measure the source only")
    parser.add_argument(
        "--max-rdy-count",
        type=int,
        default=0,
        help="start nsqd with this --max-rdy-count (0: nsqd's default, 2500); a task holds"
        " its share in flight over share / max-rdy-count connections",
    )
    parser.add_argument(
        "--cpu-split",
        action="store_true",
        help="also each source run's Python CPU per row by process (a thread samples /proc)",
    )
    parser.add_argument(
        "--no-wal",
        action="store_true",
        help="also the source without walLocation (messages held at nsqd)",
    )
    parser.add_argument(
        "--executor-read",
        default="",
        help="K,K,...: only the executor-read benchmark in K processes",
    )
    parser.add_argument(
        "--share",
        type=int,
        default=10_000,
        help="messages per share in the executor-read benchmark",
    )
    args = parser.parse_args()
    if args.executor_read:
        run_executor_read(
            [int(k) for k in args.executor_read.split(",")], args.messages, args.share
        )
        return
    import pyspark
    from pyspark.find_spark_home import _find_spark_home

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_HOME", _find_spark_home())  # local-cluster starts executors
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    pipelines = args.pipelines.split(",") + (["driver-nowal"] if args.no_wal else [])
    extra = dict(o.split("=", 1) for o in args.source_option)
    broker = nsq_bin_dir() or "embedded"
    print(
        f"PySpark {pyspark.__version__}, {os.cpu_count()} cores,"
        f" Python {sys.version.split()[0]}, nsqd: {broker}, 100-byte messages,"
        f" {args.messages} messages, maxMessagesPerBatch={args.per_batch} {extra or ''}"
        + (
            f", nsqd --max-rdy-count={args.max_rdy_count}"
            if args.max_rdy_count
            else ", nsqd's default flags"
        ),
        flush=True,
    )
    flags = {"max_rdy_count": args.max_rdy_count} if args.max_rdy_count else {}
    with NsqdServer(**flags) as server:
        if not args.no_sink:
            spark = session("local[2]")
            bench_sink(spark, server, 20_000)  # warm-up
            producer = publish(server, "bench_producer", args.rows)
            sink = bench_sink(spark, server, args.rows)
            print(f"one Producer, MPUB of 1000: {args.rows:>8} msgs  {producer:>10,.0f} msg/s")
            print(
                f"batch sink:                 {args.rows:>8} rows  {sink:>10,.0f} rows/s"
                f"  = {sink / producer:.2f}x the Producer",
                flush=True,
            )
            spark.stop()
        bares: list[tuple[float, float, float]] = []
        for rep in range(args.repeat):
            backlog(server, f"bench_consumer{rep}", args.messages)
            bares.append(bench_consumer(server, f"bench_consumer{rep}", args.messages))
            print(
                f"bare Consumer (RDY 2500): {bares[-1][0]:>10,.0f} msg/s,"
                f" {bares[-1][1] * 1e6:.2f} us CPU per message (nsqd {bares[-1][2] * 1e6:.2f} us)",
                flush=True,
            )
        bare_rate = statistics.median(b for b, _, _ in bares)
        bare_cpu = statistics.median(c for _, c, _ in bares)
        for name in pipelines:
            master, options = PIPELINES[name]
            spark = session(master)
            wal = name != "driver-nowal"
            backlog(server, f"bench_warmup_{name}", 20_000)
            bench_source(
                spark, server, f"bench_warmup_{name}", 20_000, 10_000, {**options, **extra}, wal
            )
            runs: list[SourceRun] = []
            for rep in range(args.repeat):
                topic = f"bench_{name}_{rep}"
                backlog(server, topic, args.messages)
                runs.append(
                    bench_source(
                        spark,
                        server,
                        topic,
                        args.messages,
                        args.per_batch,
                        {**options, **extra},
                        wal,
                        args.cpu_split,
                    )
                )
                run = runs[-1]
                print(
                    f"  {name} on {master}: {run.with_startup:>8,.0f} rows/s with start-up"
                    f" ({run.startup:.2f} s), {run.subscribed:>8,.0f} from subscription,"
                    f" {run.batches} batches, {run.cpu_per_row * 1e6:.2f} us Python CPU per"
                    f" row (nsqd {run.nsqd_cpu_per_row * 1e6:.2f} us)",
                    flush=True,
                )
                for role, seconds in sorted(run.cpu_split.items()):
                    print(
                        f"    {role}: {seconds:.2f} s CPU,"
                        f" {seconds / args.messages * 1e6:.2f} us per row",
                        flush=True,
                    )
            spark.stop()
            print(
                f"{name} on {master}, median of {args.repeat}:"
                f" {statistics.median(r.with_startup for r in runs) / bare_rate:.2f}x the bare"
                f" Consumer with start-up,"
                f" {statistics.median(r.subscribed for r in runs) / bare_rate:.2f}x from"
                f" subscription; Python CPU per row"
                f" {statistics.median(r.cpu_per_row for r in runs) / bare_cpu:.2f}x the bare"
                " Consumer's per message",
                flush=True,
            )


def session(master: str) -> Any:
    """A SparkSession on ``master`` with the ``nsq`` format registered."""
    from pyspark.sql import SparkSession

    from gnsqlite.spark import register

    spark = (
        SparkSession.builder.master(master)
        .appName("bench_spark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


if __name__ == "__main__":
    main()
