"""Instructions per message of one gnsqlite workload, counted by ``valgrind --tool=callgrind``.

Not a test: a steadier yardstick than messages per second on a shared
machine. The client runs under callgrind against a running nsqd; counting
starts after a warm-up run (imports, connections, caches) and stops when
the measured run ends, so the figure is the client's user-space
instructions per message (the kernel's share is not counted)::

    python benchmarks/callgrind.py sequential 2000 --nsqd 127.0.0.1:4150
    python benchmarks/callgrind.py consume_2500 20000 --nsqd 127.0.0.1:4150

Workloads: ``sequential``, ``pipelined``, ``mpub`` (the publish modes of
``gnsqlite bench``) and ``consume_<max_in_flight>``; ``bare_sequential``,
``bare_mpub`` and ``bare_consume_1`` count the same round trips with no
library (``floor.py``), and ``handoff_consume_1`` those of a reader greenlet
handing each message to a handler greenlet. Needs ``valgrind`` and ``callgrind_control`` on PATH.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

BODY = b"m" * 100


def _workload(name: str, address: str, count: int, measure: bool) -> None:
    from gnsqlite.cli.bench import consume_rate, publish_rate, queue_messages

    topic = f"callgrind_{name}_{'measured' if measure else 'warmup'}_{os.getpid()}"
    consume, publish = consume_rate, publish_rate
    if name.startswith(("bare_", "handoff_")):  # the same round trips with no library (floor.py)
        import floor  # beside this script

        kind, name = name.split("_", 1)
        client = "bare-handoff" if kind == "handoff" else "bare-gevent"
        consume, publish = floor.consume(client), floor.publish(client)
    if name.startswith("consume_"):
        max_in_flight = int(name.split("_", 1)[1])
        queue_messages(address, topic, BODY, count + 100)
        _toggle("on" if measure else "off")
        consume(address, topic, count, max_in_flight)
    else:
        _toggle("on" if measure else "off")
        publish(address, topic, BODY, count, name)
    _toggle("off")


def _toggle(state: str) -> None:
    """Switch callgrind's instrumentation of this process ``on`` or ``off``."""
    if os.environ.get("GNSQLITE_CALLGRIND"):
        subprocess.run(["callgrind_control", "-i", state, str(os.getpid())], capture_output=True)


def _child(name: str, address: str, count: int) -> None:
    _workload(name, address, max(200, count // 5), measure=False)
    _workload(name, address, count, measure=True)


def collected(script: str, argv: list[str]) -> int | None:
    """Run ``python script *argv`` under callgrind, instrumentation off until the
    child switches it on (:func:`_toggle`); the instructions it collected, or
    ``None`` (valgrind's output printed) when it failed."""
    with tempfile.TemporaryDirectory(prefix="gnsqlite-callgrind-") as tmp:
        out = os.path.join(tmp, "callgrind.out")
        cmd = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            sys.executable,
            script,
            *argv,
        ]
        # The checkout's gnsqlite, not an installed one: the child's sys.path
        # starts with benchmarks/, so the repository root goes on PYTHONPATH.
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "GNSQLITE_CALLGRIND": "1", "PYTHONPATH": path}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        found = re.search(r"Collected : (\d+)", proc.stderr)
        if proc.returncode != 0 or not found:
            print(proc.stderr[-2000:], file=sys.stderr)
            return None
    return int(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "workload",
        help="sequential, pipelined, mpub, consume_<max_in_flight>, bare_sequential, bare_mpub"
        ", bare_consume_1 or handoff_consume_1",
    )
    parser.add_argument("count", type=int, help="messages in the measured run")
    parser.add_argument("--nsqd", required=True, help="host:port of a running nsqd")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    known = (
        r"sequential|pipelined|mpub|consume_\d+"
        r"|bare_(sequential|mpub|consume_1)|handoff_consume_1"
    )
    if not re.fullmatch(known, args.workload):
        parser.error(f"unknown workload {args.workload!r}")
    if args.child:
        _child(args.workload, args.nsqd, args.count)
        return 0
    child = [args.workload, str(args.count), "--nsqd", args.nsqd, "--child"]
    instructions = collected(os.path.abspath(__file__), child)
    if instructions is None:
        return 1
    per_message = instructions / args.count
    print(f"{args.workload}: {per_message:,.0f} instructions per message ({instructions:,} in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
