"""A pynsq-style program on a plain asyncio loop (``asyncio.run``), tornado never imported.

pynsq imports tornado for its users, so such a program works under pynsq;
under the drop-in its Readers and Writers, built in a coroutine, must start
on that loop too, and its ``async def`` handler must run there.
"""

from __future__ import annotations

from collections.abc import Callable

from nsq_support import Program, channel_stats, drained

from gnsqlite.testing import NsqdServer, wait_until

PROGRAM = """\
import asyncio
import sys

from gnsqlite import nsq

TOPIC = 'aio'


async def main():
    received = []
    all_in = asyncio.Event()

    async def handler(message):
        await asyncio.sleep(0.01)  # the loop's own timer: runs on the asyncio loop
        received.append(message.body)
        print('handled', message.body.decode())
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
    reader.close()
    writer.close()
    print('tornado imported:', 'tornado' in sys.modules)


asyncio.run(main())
"""


def test_an_asyncio_run_program_connects_publishes_and_consumes(
    nsqd: NsqdServer, programs: Callable[[str], Program]
) -> None:
    program = programs(PROGRAM.format(nsqd=nsqd.tcp_address))
    program.wait_for(lambda lines: any("tornado imported" in line for line in lines), timeout=30)
    assert program.process.wait(timeout=20) == 0, program.output
    assert program.count("published OK") == 5, program.output
    assert sorted(line for line in program.lines if line.startswith("handled")) == [
        f"handled m{i}" for i in range(5)
    ]
    assert "tornado imported: False" in program.lines, program.output
    wait_until(lambda: drained(nsqd, "aio", "c"), timeout=10)
    stats = channel_stats(nsqd, "aio", "c")
    assert stats["message_count"] == 5 and stats["requeue_count"] == 0, stats
