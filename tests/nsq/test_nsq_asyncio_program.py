"""pynsq-style programs on a plain asyncio loop (``asyncio.run``), tornado never imported.

pynsq imports tornado for its users, so such a program works under pynsq;
under the drop-in its Readers and Writers, built in a coroutine, must start
on that loop too, its ``async def`` handler must run there (in the one
thread gevent's hub shares with the loop), and ``await reader.close()`` in a
``finally`` must close drained on Ctrl-C while the loop keeps running the
handlers it waits for.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

import pytest
from nsq_support import Program, channel_stats, drained

from gnsqlite.http import NsqdHTTPClient
from gnsqlite.testing import NsqdServer, wait_until

PROGRAM = """\
import asyncio
import sys
import threading

from gnsqlite import nsq

TOPIC = 'aio'


async def main():
    received = []
    all_in = asyncio.Event()

    async def handler(message):
        await asyncio.sleep(0.01)  # the loop's own timer: runs on the asyncio loop
        received.append(message.body)
        print('handled', message.body.decode(), 'thread', threading.get_ident())
        if len(received) == 5:
            all_in.set()
        return True

    writer = nsq.Writer(['{nsqd}'])
    reader = nsq.Reader(topic=TOPIC, channel='c', message_handler=handler,
                        nsqd_tcp_addresses=['{nsqd}'], max_in_flight=5)
    while not writer.conns:
        await asyncio.sleep(0.05)
    for i in range(5):
        print('published', (await writer.pub(TOPIC, b'm%d' % i)).decode())
    await asyncio.wait_for(all_in.wait(), 20)
    await reader.close()
    await writer.close()
    print('main thread', threading.get_ident())
    print('tornado imported:', 'tornado' in sys.modules)


asyncio.run(main())
"""

INTERRUPTED = """\
import asyncio

from gnsqlite import nsq


async def main():
    started = 0

    async def handler(message):
        nonlocal started
        started += 1
        print('started', started)
        await {handler_awaits}
        print('finished', message.body.decode())
        return True

    reader = nsq.Reader(topic='{topic}', channel='c', message_handler=handler,
                        nsqd_tcp_addresses=['{nsqd}'], max_in_flight=3)
    try:
        await asyncio.Event().wait()
    finally:
        if {close}:
            await reader.close()  # drains: the loop runs the handlers meanwhile
            print('closed')


try:
    asyncio.run(main())
except KeyboardInterrupt:
    print('interrupted')
"""


def interrupted(
    nsqd: NsqdServer, programs: Callable[[str], Program], topic: str, **source: str
) -> Program:
    """Run INTERRUPTED with 3 messages in its handlers, Ctrl-C it, check it ended cleanly."""
    NsqdHTTPClient(nsqd.http_address).mpub(topic, [b"a", b"b", b"c"])
    program = programs(INTERRUPTED.format(nsqd=nsqd.tcp_address, topic=topic, **source))
    program.wait_for(lambda lines: "started 3" in lines)
    assert program.stop(signal.SIGINT, timeout=15) == 0, program.output
    assert program.lines[-1] == "interrupted", program.output
    assert "Traceback" not in program.output and "CancelledError" not in program.output
    return program


def test_an_asyncio_run_program_connects_publishes_and_consumes(
    nsqd: NsqdServer, programs: Callable[[str], Program]
) -> None:
    program = programs(PROGRAM.format(nsqd=nsqd.tcp_address))
    program.wait_for(lambda lines: any("tornado imported" in line for line in lines), timeout=30)
    assert program.process.wait(timeout=20) == 0, program.output
    assert program.count("published OK") == 5, program.output
    handled = sorted(line.split()[1] for line in program.lines if line.startswith("handled"))
    assert handled == [f"m{i}" for i in range(5)], program.output
    main_thread = next(line for line in program.lines if line.startswith("main thread")).split()[2]
    assert program.count(f"thread {main_thread}") == 6, "handlers run in the loop's thread"
    assert "tornado imported: False" in program.lines, program.output
    wait_until(lambda: drained(nsqd, "aio", "c"), timeout=10)
    stats = channel_stats(nsqd, "aio", "c")
    assert stats["message_count"] == 5 and stats["requeue_count"] == 0, stats


# asyncio.run() turns a SIGINT into cancelling the main task from Python 3.11 on;
# on 3.10 KeyboardInterrupt is raised wherever the loop is, so these programs end otherwise.
ASYNCIO_RUN_CANCELS_ON_SIGINT = pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="asyncio.run() cancels the main task on SIGINT from Python 3.11 on",
)


@ASYNCIO_RUN_CANCELS_ON_SIGINT
def test_ctrl_c_in_an_asyncio_run_program_closes_drained(
    nsqd: NsqdServer, programs: Callable[[str], Program]
) -> None:
    program = interrupted(
        nsqd, programs, "aio_int", handler_awaits="asyncio.sleep(0.5)", close="True"
    )  # the handlers still await on the loop when Ctrl-C comes
    assert program.lines[-2] == "closed", program.output
    assert sorted(line for line in program.lines if line.startswith("finished")) == [
        "finished a",
        "finished b",
        "finished c",
    ], program.output
    stats = channel_stats(nsqd, "aio_int", "c")
    assert stats["message_count"] == 3 and stats["requeue_count"] == 0, stats
    assert stats["depth"] == 0 and stats["in_flight_count"] == 0, stats


@ASYNCIO_RUN_CANCELS_ON_SIGINT
def test_handlers_cancelled_by_asyncio_run_are_requeued_without_a_crash(
    nsqd: NsqdServer, programs: Callable[[str], Program]
) -> None:
    """No close(): asyncio.run() cancels the handler tasks; each message is requeued (REQ 0)."""
    interrupted(
        nsqd, programs, "aio_cancel", handler_awaits="asyncio.Event().wait()", close="False"
    )
    assert channel_stats(nsqd, "aio_cancel", "c")["requeue_count"] >= 3
