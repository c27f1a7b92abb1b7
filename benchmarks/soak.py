"""A soak: producer -> nsqd -> consumer for N minutes, with injected faults or without.

Not a test: run it by hand, ``python benchmarks/soak.py --minutes 30``. It
starts an nsqd (the real one when ``GNSQLITE_NSQD`` names its binaries, else
the embedded broker; a 3 s message timeout with faults, 60 s without) and runs:

* a publisher: numbered messages at ``--rate`` per second;
* a consumer (``max_in_flight`` 50, no backoff).

With faults (the default) a :class:`~gnsqlite.testing.proxy_process.ProxyProcess`
(a fault proxy in a child process, so its threads and buffers are not this
process's memory) stands before nsqd for the producer and another for the
consumer; the handler fails 2% of messages and sleeps past the message
timeout on 0.5%; faults come every ``--fault-interval`` seconds on average
(seeded): connection resets, half-closes, stalls, delays; nsqd is restarted
every ``--restart-every`` seconds (same ports and data). ``--no-faults``
connects straight to nsqd with a handler that never fails or dawdles: the
steady path alone, so growth on the fault paths (reconnect, restart,
redelivery, give-up) can be told from growth on it.

Once a minute it prints what was published and handled, duplicates by cause,
RSS, the memory tracemalloc traces (and its own overhead, which RSS includes),
open fds, live greenlets, the live objects of gnsqlite's classes by type and
the size of the run's books (every 10 s they fold the numbers published a
minute ago and before into counts). The books are kept by a child process
(:class:`~gnsqlite.testing.ledger_process.LedgerProcess`; its RSS is printed
apart): a minute of numbers is tens of MiB, and kept here its tables, which
grow in steps when a busy machine folds them late, would be counted in this
process's RSS as the client's. At the end of the warm-up (``--warmup`` minutes)
and at the end it snapshots the traced memory and prints its growth by owner
(client, books: the run's own records on their way to the child, other) and
the top tracebacks that grew, then the mappings whose resident pages grew
(glibc's heap and arenas, Python's object arenas, a library's pages).

At the end it stops the faults, waits until every acknowledged message was
handled and the channel is empty, and exits 1 when anything was lost, a
duplicate is unexplained, or a resource grew from the three minutes after
the warm-up to the last three: RSS by more than ``--rss-tolerance`` MiB,
traced memory by more than ``--traced-tolerance`` MiB, 10 fds, 50
greenlets. ``GNSQLITE_FAULT_SEED`` or ``--seed`` replays a run's faults.
"""

from __future__ import annotations

import argparse
import atexit
import collections
import contextlib
import logging
import random
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field

import gevent

from gnsqlite.consumer import Consumer
from gnsqlite.errors import NSQError
from gnsqlite.producer import Producer
from gnsqlite.testing import NsqdServer, wait_until
from gnsqlite.testing.faults import (
    AccountingHandler,
    FaultInjector,
    live_greenlets,
    open_fds,
    rss_bytes,
    rss_parts,
    seed_from_env,
)
from gnsqlite.testing.ledger_process import LedgerProcess
from gnsqlite.testing.memory import (
    Mapping,
    MemoryWatch,
    count_objects,
    malloc_info,
    mapping_growth,
    rss_by_mapping,
    trim_malloc,
)
from gnsqlite.testing.proxy_process import ProxyProcess

TOPIC = "soak"
CHANNEL = "soak"
MAX_IN_FLIGHT = 50
MiB = 1024 * 1024
SETTLE_AFTER = 60.0  # seconds: numbers published this long ago are folded into counts
SETTLE_EVERY = 10.0  # seconds
#: The classes whose live instances each minute's line shows (short names).
WATCHED = ("Connection", "Link", "Message", "Timer", "greenlet")


@dataclass
class Sample:
    minute: int
    published: int
    acked: int
    handled: int
    duplicates: int
    rss: int
    rss_anon: int  # of rss: what the process allocated
    rss_file: int  # of rss: pages of mapped files (libraries) touched so far
    traced: int
    overhead: int  # tracemalloc's own bytes (in rss, not in traced)
    trimmed: int  # rss after malloc_trim(0) (0: not asked)
    malloc_in_use: int  # bytes glibc's malloc has handed out and not had back (0: no glibc)
    malloc_free: int  # bytes freed that glibc's malloc keeps in its heap and arenas
    fds: int
    greenlets: int
    queued: int
    objects: collections.Counter[str] = field(default_factory=collections.Counter)
    causes: dict[str, int] = field(default_factory=dict)  # duplicates by cause


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--rate", type=float, default=100.0, help="messages published per second")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--faults",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="proxies, faults, restarts, failing and slow handlers",
    )
    parser.add_argument("--fault-interval", type=float, default=2.0, help="mean seconds")
    parser.add_argument("--restart-every", type=float, default=60.0, help="seconds (0: never)")
    parser.add_argument(
        "--msg-timeout",
        type=float,
        default=None,
        help="nsqd's, seconds (default: 3 with faults, 60 without)",
    )
    parser.add_argument("--warmup", type=int, default=3, help="minutes before the baseline")
    parser.add_argument("--rss-tolerance", type=float, default=24.0, help="MiB")
    parser.add_argument("--traced-tolerance", type=float, default=2.0, help="MiB")
    parser.add_argument("--trace-frames", type=int, default=12, help="0: no tracemalloc")
    parser.add_argument(
        "--malloc-trim",
        action="store_true",
        help="each minute, also the RSS after glibc's malloc_trim(0)",
    )
    parser.add_argument("--report-every", type=float, default=60.0, help="seconds")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else seed_from_env()
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("gnsqlite").setLevel(logging.CRITICAL)  # injected failures are noisy
    rng = random.Random(seed)
    watch = MemoryWatch(args.trace_frames).start() if args.trace_frames else None
    # Without faults, nsqd's default 60 s: a minute's sampling blocks the hub
    # for seconds (15.8 s for the warm-up snapshot at 1,000 msg/s on the
    # loaded machine) and 3 s would time out what was in flight meanwhile.
    if args.msg_timeout is None:
        args.msg_timeout = 3.0 if args.faults else 60.0
    # SIGTERM ends a run as Ctrl-C does, and the nsqd and proxies this run
    # started are stopped at exit however it ends (they outlived a killed run).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    nsqd = NsqdServer(msg_timeout=args.msg_timeout)
    nsqd.start()
    atexit.register(nsqd.close)
    print(
        f"soak: seed={seed} nsqd={'real' if nsqd.is_real else 'embedded'} {nsqd.tcp_address}"
        f" minutes={args.minutes} rate={args.rate}/s faults={args.faults}"
        f" warmup={args.warmup} trace_frames={args.trace_frames}",
        flush=True,
    )
    proxies = []
    if args.faults:
        proxies = [ProxyProcess(nsqd.tcp_address).start() for _ in range(2)]
        for proxy in proxies:
            atexit.register(proxy.close)
        pub_address, sub_address = proxies[0].address, proxies[1].address
    else:
        pub_address = sub_address = nsqd.tcp_address
    ledger = LedgerProcess(transit=2.5 + 0.05).start()  # the longest stall plus a delay
    atexit.register(ledger.close)
    handler = AccountingHandler(
        ledger,
        random.Random(rng.random()),
        fail_rate=0.02 if args.faults else 0.0,
        slow_rate=0.005 if args.faults else 0.0,
    )
    # With faults, heartbeats every second: a stall must be noticed. Without,
    # the default 30 s: sampling a large heap under tracemalloc blocks the
    # hub for seconds on a loaded machine (8 s seen), which a shorter
    # silence limit would take for a dead connection (a fault of our making).
    heartbeat = 1.0 if args.faults else 30.0
    producer = Producer([pub_address], timeout=5.0, heartbeat_interval=heartbeat)
    consumer = Consumer(
        TOPIC,
        CHANNEL,
        handler,
        nsqd_tcp_addresses=[sub_address],
        max_in_flight=MAX_IN_FLIGHT,
        heartbeat_interval=heartbeat,
        backoff=None,  # failures requeue without slowing the consumer down
        requeue_delay=0.1,
        max_reconnect_interval=1.0,
        on_giving_up=ledger.gave_up,  # past max_attempts: counted, not lost
    )
    consumer.on_server_error = ledger.server_error  # type: ignore[method-assign]  # E_FIN_FAILED ids
    injector = FaultInjector(
        proxies,  # type: ignore[arg-type]  # ProxyProcess offers FaultProxy's fault methods
        random.Random(rng.random()),
        weights={"cut": 3, "half_close_client": 1, "half_close_server": 1, "stall": 1, "delay": 1},
        stall_for=2.5,  # past two heartbeat intervals: the client must notice by itself
    )
    published = 0
    samples: list[Sample] = []
    state = {"restarts": 0, "stop": False}

    def publish() -> None:
        nonlocal published
        period = 1.0 / args.rate
        next_at = time.monotonic()
        while not state["stop"]:
            number = published
            published += 1
            try:
                producer.publish(TOPIC, str(number).encode())
                ledger.ack(number)
            except NSQError:
                ledger.publish_failed(number)
            next_at += period
            gevent.sleep(max(0.0, next_at - time.monotonic()))

    def faults() -> None:
        last_restart = time.monotonic()
        while not state["stop"]:
            gevent.sleep(rng.expovariate(1.0 / args.fault_interval))
            if state["stop"]:
                return
            if args.restart_every and time.monotonic() - last_restart >= args.restart_every:
                nsqd.restart()
                state["restarts"] += 1
                last_restart = time.monotonic()
            else:
                injector.inject()

    def settle() -> None:
        # Every SETTLE_EVERY s, fold what was published SETTLE_AFTER s ago and
        # before: the books hold about a minute of numbers, not several.
        marks: list[tuple[float, int]] = []
        while not state["stop"]:
            gevent.sleep(SETTLE_EVERY)
            now = time.monotonic()
            marks.append((now, published))
            old = [mark for mark in marks if now - mark[0] >= SETTLE_AFTER]
            if old:
                ledger.settle(old[-1][1])
                marks = [mark for mark in marks if mark[0] > old[-1][0]]

    producer.start()
    consumer.start()
    workers = [gevent.spawn(publish), gevent.spawn(settle)]
    if args.faults:
        workers.append(gevent.spawn(faults))
    started = time.monotonic()
    baseline: collections.Counter[str] | None = None
    mappings: dict[tuple[int, str], Mapping] = {}
    try:
        minute = 0
        end = started + args.minutes * 60
        while time.monotonic() < end:
            # Ticks on the clock (the sampling's own seconds do not push them back).
            tick = min(started + (minute + 1) * args.report_every, end)
            gevent.sleep(max(0.0, tick - time.monotonic()))
            minute += 1
            sample = take_sample(minute, published, ledger, consumer, args.malloc_trim)
            samples.append(sample)
            print_sample(sample, ledger, injector, state["restarts"], proxies, started)
            if len(samples) > 1 and samples[-2].minute != args.warmup:
                # Only the warm-up's count and the last are compared: the rest would be
                # the soak's own growth in the process it measures.
                samples[-2].objects = collections.Counter()
            if minute == args.warmup:
                baseline = sample.objects
                mappings = rss_by_mapping()
                if watch is not None:
                    took = time.monotonic()
                    watch.mark()
                    print(
                        f"warm-up over: traced memory marked ({time.monotonic() - took:.2f} s)",
                        flush=True,
                    )
        if watch is not None and minute > args.warmup:
            print(watch.growth().report(), flush=True)
        if baseline is not None:
            grown = object_growth(baseline, samples[-1].objects)
            print(f"objects grown since the warm-up: {grown}", flush=True)
            lines = mapping_growth(mappings, rss_by_mapping())
            print("rss grown since the warm-up, by mapping:", *lines, sep="\n", flush=True)
    finally:
        state["stop"] = True
        gevent.joinall(workers, timeout=30)
        for proxy in proxies:
            with contextlib.suppress(RuntimeError):
                proxy.resume()
                proxy.delay(0.0)
    failures: list[str] = []
    try:
        wait_until(
            lambda: not ledger.lost() and nsqd.channel_drained(TOPIC, CHANNEL),
            timeout=120,
            interval=0.5,
            message="every acknowledged message handled",
            ignore=(NSQError, OSError),
        )
    except AssertionError as exc:
        failures.append(f"{exc}; lost {ledger.explain_lost(20)}")
    consumer.close(timeout=10.0)
    producer.close()
    dups = ledger.duplicates()
    print(
        f"end: {ledger.summary()} slow handlers {handler.slow}"
        f" faults {dict(injector.counts)} restarts {state['restarts']}"
    )
    if dups["unexplained"]:
        failures.append(f"{dups['unexplained']} duplicates without a cause")
    failures += grew(samples, args.warmup, args.rss_tolerance, args.traced_tolerance)
    ledger.close()
    for proxy in proxies:
        proxy.close()
    nsqd.close()
    if watch is not None:
        watch.stop()
    if failures:
        print(f"FAIL (seed={seed}): " + "; ".join(failures), flush=True)
        return 1
    print(f"OK (seed={seed})", flush=True)
    return 0


def take_sample(
    minute: int, published: int, ledger: LedgerProcess, consumer: Consumer, trim: bool
) -> Sample:
    """One minute's figures (counting objects blocks for a few ms per 100k live objects)."""
    objects = count_objects()
    memory = MemoryWatch.sample()
    dups = ledger.duplicates()
    heap = malloc_info()  # before a trim: what the allocator kept
    trimmed = rss_bytes() if trim and trim_malloc() else 0
    anon, mapped = rss_parts()
    return Sample(
        minute,
        published,
        ledger.acked_count,
        ledger.handled_count,
        sum(dups.values()),
        memory.rss,
        anon,
        mapped,
        memory.traced,
        memory.overhead,
        trimmed,
        heap.in_use if heap else 0,
        heap.free if heap else 0,
        open_fds(),
        len(live_greenlets()),
        consumer.stats()["queued"],
        objects,
        dups,
    )


def print_sample(
    sample: Sample,
    ledger: LedgerProcess,
    injector: FaultInjector,
    restarts: int,
    proxies: list[ProxyProcess],
    started: float,
) -> None:
    watched = {
        name: sum(n for key, n in sample.objects.items() if key.rsplit(".", 1)[-1] == name)
        for name in WATCHED
    }
    books = ledger.books()
    proxy_rss = " ".join(f"{p.rss_bytes() / MiB:.1f}" for p in proxies)
    print(
        f"minute {sample.minute:3d} (at {time.monotonic() - started:.0f} s):"
        f" published {sample.published} acked {sample.acked}"
        f" handled {sample.handled} duplicates {sample.duplicates} {sample.causes}"
        f" rss {sample.rss / MiB:.1f} MiB"
        f" (anon {sample.rss_anon / MiB:.1f} file {sample.rss_file / MiB:.1f})"
        + (f" (trimmed {sample.trimmed / MiB:.1f})" if sample.trimmed else "")
        + (
            f" malloc in use {sample.malloc_in_use / MiB:.2f} free {sample.malloc_free / MiB:.2f}"
            if sample.malloc_in_use
            else ""
        )
        + f" traced {sample.traced / MiB:.2f} MiB"
        f" tracemalloc {sample.overhead / MiB:.1f} MiB fds {sample.fds}"
        f" greenlets {sample.greenlets} queued {sample.queued} objects {watched}"
        f" books {books} books rss {ledger.rss_bytes() / MiB:.1f} MiB"
        f" faults {dict(injector.counts)} restarts {restarts}"
        + (f" proxy rss {proxy_rss} MiB" if proxies else ""),
        flush=True,
    )


def object_growth(before: collections.Counter[str], after: collections.Counter[str]) -> str:
    """The classes with more live objects ``after`` than ``before``, most first."""
    grown = {k: after[k] - before[k] for k in after if after[k] > before[k]}
    return ", ".join(f"{k} +{n}" for k, n in sorted(grown.items(), key=lambda kv: -kv[1])) or "none"


def grew(
    samples: list[Sample], warmup: int, rss_tolerance: float, traced_tolerance: float
) -> list[str]:
    """What grew from the three minutes after the warm-up to the last three (empty: nothing,
    or too short a run)."""
    if len(samples) < warmup + 4:
        return []
    first, last = samples[warmup : warmup + 3], samples[-3:]
    limits = {
        "rss": rss_tolerance * MiB,
        "traced": traced_tolerance * MiB,
        "fds": 10.0,
        "greenlets": 50.0,
        "queued": 2.0 * MAX_IN_FLIGHT,
    }
    out = []
    for name, limit in limits.items():
        before = statistics.mean(getattr(s, name) for s in first)
        after = statistics.mean(getattr(s, name) for s in last)
        if after - before > limit:
            out.append(f"{name} grew from {before:.0f} to {after:.0f} (tolerance {limit:.0f})")
            if name == "rss":  # whose pages: allocated, or libraries' code touched
                parts = [
                    statistics.mean(getattr(s, part) for s in last)
                    - statistics.mean(getattr(s, part) for s in first)
                    for part in ("rss_anon", "rss_file", "malloc_in_use", "malloc_free")
                ]
                out[-1] += (
                    f" (anon {parts[0] / MiB:+.2f} MiB, file {parts[1] / MiB:+.2f} MiB;"
                    f" malloc in use {parts[2] / MiB:+.2f} MiB, free {parts[3] / MiB:+.2f} MiB)"
                )
    return out


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("soak: interrupted; stopping the nsqd and proxies it started", file=sys.stderr)
        sys.exit(130)
