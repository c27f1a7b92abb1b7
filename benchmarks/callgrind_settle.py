"""Instructions per message of ``Settler.settle`` alone, counted by ``valgrind --tool=callgrind``.

Not a test: the settler's per-message path (the skip tests, the lease
timer's check, a handler that returns, FIN to a responder that records
nothing) as a dispatcher's worker runs it, with no socket, no hub turn and
no garbage collection, so the count is steady from run to run (the
end-to-end ``callgrind.py consume_2500`` varies by thousands with how reads
batch). ``--max-lease 0`` turns lease extension off::

    PYTHONHASHSEED=0 python benchmarks/callgrind_settle.py 20000
    PYTHONHASHSEED=0 python benchmarks/callgrind_settle.py 20000 --max-lease 0

Needs ``valgrind`` and ``callgrind_control`` on PATH; runs the child as
``callgrind.py`` does (:func:`callgrind.collected`).
"""

from __future__ import annotations

import argparse
import gc
import inspect
import os
import sys
from typing import Any

from callgrind import _toggle, collected  # beside this script


class _Conn:
    closed = False
    max_msg_timeout = 900.0


class _Responder:
    def on_finish(self, message: Any) -> None:
        pass

    def on_requeue(self, message: Any, delay: Any, backoff: bool) -> None:
        pass

    def on_touch(self, message: Any) -> None:
        pass


def _child(count: int, max_lease: float | None) -> None:
    import gevent

    from gnsqlite.config import ConsumerConfig
    from gnsqlite.consumer.settle import Settler
    from gnsqlite.message import Message
    from gnsqlite.timers import TimerWheel

    options: dict[str, Any] = {}
    running: dict[Any, Any] = {}
    if "leases" in inspect.signature(Settler).parameters:  # a checkout before issue 39 has none
        from gnsqlite.consumer.lease import Leases

        config = ConsumerConfig(max_lease=max_lease)
        leases = Leases(config.max_lease)
        leases.start(TimerWheel.for_hub())
        leases.running = running
        options["leases"] = leases
    else:
        config = ConsumerConfig()
    settler = Settler(config, None, None, lambda nsqd: None, **options)
    responder, conn = _Responder(), _Conn()
    messages = [
        Message(b"%016d" % i, b"body", 0, 1, "n:4150", responder, 60.0, conn) for i in range(count)
    ]
    handler = lambda message: None  # noqa: E731
    me = gevent.getcurrent()
    gc.disable()
    _toggle("on")
    for message in messages:  # what Dispatcher._work does around settle
        running[me] = message
        settler.settle(message, handler)
        running.pop(me, None)
    _toggle("off")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("count", type=int, help="messages settled in the measured loop")
    parser.add_argument("--max-lease", type=float, default=float("inf"), help="0: leases off")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.count, args.max_lease)
        return 0
    child = [str(args.count), "--max-lease", str(args.max_lease), "--child"]
    instructions = collected(os.path.abspath(__file__), child)
    if instructions is None:
        return 1
    per_message = instructions / args.count
    print(f"settle: {per_message:,.0f} instructions per message ({instructions:,} in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
