"""A soak: producer -> nsqd -> consumer for N minutes with injected faults.

Not a test: run it by hand, ``python benchmarks/soak.py --minutes 30``. It
starts an nsqd (the real one when ``GNSQLITE_NSQD`` names its binaries, else
the embedded broker) with a short message timeout, puts a
:class:`~gnsqlite.testing.FaultProxy` before it for the producer and another
for the consumer, and runs:

* a publisher: numbered messages at ``--rate`` per second;
* a consumer (``max_in_flight`` 50, no backoff) whose handler fails 2% of messages and
  sleeps past the message timeout on 0.5%;
* faults every ``--fault-interval`` seconds on average (seeded): connection
  resets, half-closes, stalls, delays; nsqd restarted every
  ``--restart-every`` seconds (same ports and data).

Once a minute it prints what was published and handled, duplicates by cause,
RSS, open fds and live greenlets. At the end it stops the faults, waits until
every acknowledged message was handled and the channel is empty, and exits 1
when anything was lost, a duplicate is unexplained, or a resource grew: the
mean of the last three minutes against the mean of minutes 2-4 (the first is
warm-up) may grow by at most ``--rss-tolerance`` MiB of RSS, 10 fds and 50
greenlets. ``GNSQLITE_FAULT_SEED`` or ``--seed`` replays a run's faults.
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import sys
import time
from dataclasses import dataclass

import gevent

from gnsqlite.consumer import Consumer
from gnsqlite.errors import NSQError
from gnsqlite.producer import Producer
from gnsqlite.testing import FaultProxy, NsqdServer, wait_until
from gnsqlite.testing.faults import (
    AccountingHandler,
    FaultInjector,
    Ledger,
    live_greenlets,
    open_fds,
    rss_bytes,
    seed_from_env,
)

TOPIC = "soak"
CHANNEL = "soak"
MAX_IN_FLIGHT = 50
MiB = 1024 * 1024


@dataclass
class Sample:
    minute: int
    published: int
    acked: int
    handled: int
    duplicates: int
    rss: int
    fds: int
    greenlets: int
    queued: int


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--rate", type=float, default=100.0, help="messages published per second")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--fault-interval", type=float, default=2.0, help="mean seconds")
    parser.add_argument("--restart-every", type=float, default=60.0, help="seconds (0: never)")
    parser.add_argument("--msg-timeout", type=float, default=3.0, help="nsqd's, seconds")
    parser.add_argument("--rss-tolerance", type=float, default=24.0, help="MiB")
    parser.add_argument("--report-every", type=float, default=60.0, help="seconds")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else seed_from_env()
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("gnsqlite").setLevel(logging.CRITICAL)  # injected failures are noisy
    rng = random.Random(seed)
    nsqd = NsqdServer(msg_timeout=args.msg_timeout)
    nsqd.start()
    print(
        f"soak: seed={seed} nsqd={'real' if nsqd.is_real else 'embedded'} {nsqd.tcp_address}"
        f" minutes={args.minutes} rate={args.rate}/s",
        flush=True,
    )
    pub_proxy = FaultProxy(nsqd.tcp_address).start()
    sub_proxy = FaultProxy(nsqd.tcp_address).start()
    ledger = Ledger(transit=2.5 + 0.05)  # the longest stall plus a delay
    handler = AccountingHandler(
        ledger, random.Random(rng.random()), fail_rate=0.02, slow_rate=0.005
    )
    producer = Producer([pub_proxy.address], timeout=5.0, heartbeat_interval=1.0)
    consumer = Consumer(
        TOPIC,
        CHANNEL,
        handler,
        nsqd_tcp_addresses=[sub_proxy.address],
        max_in_flight=MAX_IN_FLIGHT,
        heartbeat_interval=1.0,
        backoff=None,  # failures requeue without slowing the consumer down
        requeue_delay=0.1,
        max_reconnect_interval=1.0,
        on_giving_up=ledger.gave_up,  # past max_attempts: counted, not lost
    )
    consumer.on_server_error = ledger.server_error  # type: ignore[method-assign]  # E_FIN_FAILED ids
    injector = FaultInjector(
        [pub_proxy, sub_proxy],
        random.Random(rng.random()),
        weights={"cut": 3, "half_close_client": 1, "half_close_server": 1, "stall": 1,
                 "delay": 1},
        stall_for=2.5,  # past two heartbeat intervals: the client must notice by itself
    )  # fmt: skip
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
                ledger.unacked += 1
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

    producer.start()
    consumer.start()
    workers = [gevent.spawn(publish), gevent.spawn(faults)]
    started = time.monotonic()
    settle_marks: list[int] = []
    try:
        minute = 0
        while time.monotonic() - started < args.minutes * 60:
            gevent.sleep(min(args.report_every, args.minutes * 60 - (time.monotonic() - started)))
            minute += 1
            settle_marks.append(published)
            if len(settle_marks) > 3:  # numbers published 3+ minutes ago are settled
                ledger.settle(settle_marks[-4])
            dups = ledger.duplicates()
            sample = Sample(minute, published, ledger.acked_count, ledger.handled_count,
                            sum(dups.values()), rss_bytes(), open_fds(), len(live_greenlets()),
                            consumer.stats()["queued"])  # fmt: skip
            samples.append(sample)
            print(
                f"minute {minute:3d}: published {sample.published} acked {sample.acked}"
                f" handled {sample.handled} duplicates {sample.duplicates} {dups}"
                f" rss {sample.rss / MiB:.1f} MiB fds {sample.fds}"
                f" greenlets {sample.greenlets} queued {sample.queued}"
                f" faults {dict(injector.counts)} restarts {state['restarts']}",
                flush=True,
            )
    finally:
        state["stop"] = True
        gevent.joinall(workers, timeout=30)
        for proxy in (pub_proxy, sub_proxy):
            proxy.resume()
            proxy.delay(0.0)
    failures: list[str] = []
    try:
        wait_until(lambda: not ledger.lost() and nsqd.channel_drained(TOPIC, CHANNEL),
                   timeout=120, interval=0.5, message="every acknowledged message handled",
                   ignore=(NSQError, OSError))  # fmt: skip
    except AssertionError as exc:
        failures.append(f"{exc}; lost {ledger.explain_lost(20)}")
    consumer.close(timeout=10.0)
    producer.close()
    dups = ledger.duplicates()
    print(f"end: {ledger.summary()} slow handlers {handler.slow}"
          f" faults {dict(injector.counts)} restarts {state['restarts']}")  # fmt: skip
    if dups["unexplained"]:
        failures.append(f"{dups['unexplained']} duplicates without a cause")
    failures += grew(samples, args.rss_tolerance)
    pub_proxy.close()
    sub_proxy.close()
    nsqd.close()
    if failures:
        print(f"FAIL (seed={seed}): " + "; ".join(failures), flush=True)
        return 1
    print(f"OK (seed={seed})", flush=True)
    return 0


def grew(samples: list[Sample], rss_tolerance: float) -> list[str]:
    """What grew from minutes 2-4 to the last three (empty: nothing did, or too short a run)."""
    if len(samples) < 5:
        return []
    first, last = samples[1:4], samples[-3:]
    limits = {"rss": rss_tolerance * MiB, "fds": 10.0, "greenlets": 50.0,
              "queued": 2.0 * MAX_IN_FLIGHT}  # fmt: skip
    out = []
    for name, limit in limits.items():
        before = statistics.mean(getattr(s, name) for s in first)
        after = statistics.mean(getattr(s, name) for s in last)
        if after - before > limit:
            out.append(f"{name} grew from {before:.0f} to {after:.0f} (tolerance {limit:.0f})")
    return out


if __name__ == "__main__":
    sys.exit(main())
