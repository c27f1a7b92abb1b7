"""Run each exactly-once crash scenario of test_wal_exactly_once.py N times on one nsqd.

    GNSQLITE_NSQD=/path/to/nsq/bin python tests/spark/run_crash_scenarios.py [N] [-k EXPR]

N defaults to 20. Each run is one pytest process (a fresh nsqd, Spark and
temporary directory), so a failure leaves its own logs; prints one line per
run and a tally per scenario, and exits non-zero if any run failed.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCENARIOS = [
    "test_read_on_executors_a_sigkilled_driver_restarted_writes_every_message_once",
    "test_read_on_executors_a_python_worker_sigkilled_loses_and_repeats_nothing[mid-read]",
    "test_read_on_executors_a_python_worker_sigkilled_loses_and_repeats_nothing"
    "[between-segment-write-and-fins]",
    "test_a_sigkilled_driver_restarted_on_its_checkpoint_writes_every_message_once",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="?", type=int, default=20)
    parser.add_argument("-k", default="", help="only the scenarios whose name contains this")
    args = parser.parse_args()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    passed: collections.Counter[str] = collections.Counter()
    for name in (s for s in SCENARIOS if args.k in s):
        for run in range(1, args.runs + 1):
            started = time.monotonic()
            result = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-x",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    f"{HERE / 'test_wal_exactly_once.py'}::{name}",
                ],
                env=env,
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=False,
            )
            ok = result.returncode == 0
            passed[name] += ok
            print(
                f"{name} run {run}/{args.runs}: {'pass' if ok else 'FAIL'}"
                f" in {time.monotonic() - started:.0f} s",
                flush=True,
            )
            if not ok:
                print(result.stdout[-4000:], result.stderr[-2000:], sep="\n", flush=True)
        print(f"{name}: {passed[name]} of {args.runs} passed", flush=True)
    return 0 if all(passed[n] == args.runs for n in SCENARIOS if args.k in n) else 1


if __name__ == "__main__":
    sys.exit(main())
