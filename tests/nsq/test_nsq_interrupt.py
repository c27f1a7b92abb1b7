"""Ctrl-C in a pynsq-style program whose handler holds messages with ``enable_async()``.

The first SIGINT starts the drained close and says at once what it waits for
(how many messages, how long at most) and that a second Ctrl-C skips it; the
second makes ``run()`` return promptly, the held messages requeued (REQ 0:
nsqd delivers them again at once, not after its ``msg_timeout``).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest
from nsq_support import Program, channel_stats

from gnsqlite.http import NsqdHTTPClient
from gnsqlite.testing import NsqdServer, wait_until

HOLDER = """\
from gnsqlite import nsq

held = []

def handler(message):
    message.enable_async()  # answered later... never, in this program
    held.append(message)
    print('holding', len(held))
    return None

nsq.Reader(topic='held', channel='c', message_handler=handler,
           nsqd_tcp_addresses=['{nsqd}'], max_in_flight=10)
nsq.run()
print('run() returned')
"""

AWAITER = """\
import asyncio
from gnsqlite import nsq

waiting = 0

async def handler(message):
    global waiting
    waiting += 1
    print('holding', waiting)
    await asyncio.Event().wait()  # an answer that never comes
    return True

nsq.Reader(topic='held', channel='c', message_handler=handler,
           nsqd_tcp_addresses=['{nsqd}'], max_in_flight=10)
nsq.run()
print('run() returned')
"""


@pytest.mark.parametrize("source", [HOLDER, AWAITER], ids=["enable_async", "async def"])
def test_a_second_ctrl_c_requeues_held_messages_and_exits_at_once(
    nsqd: NsqdServer, programs: Callable[[str], Program], source: str
) -> None:
    NsqdHTTPClient(nsqd.http_address).mpub("held", [b"a", b"b", b"c"])
    program = programs(source.format(nsqd=nsqd.tcp_address))
    program.wait_for(lambda lines: "holding 3" in lines)

    program.process.send_signal(signal.SIGINT)
    program.wait_for(lambda lines: any("Ctrl-C again" in line for line in lines), timeout=5)
    notice = next(line for line in program.lines if "Ctrl-C again" in line)
    assert "3 messages" in notice and "30 s" in notice, notice
    assert program.process.poll() is None, "the first Ctrl-C waits for the held messages"

    sent = time.monotonic()
    assert program.stop(signal.SIGINT, timeout=10) == 0, program.output
    assert time.monotonic() - sent < 5, program.output
    assert "run() returned" in program.lines, program.output
    assert any("requeued 3" in line for line in program.lines), program.output
    assert "Traceback" not in program.output and "Task was destroyed" not in program.output
    # Requeued, not left to time out in nsqd (its msg_timeout is 60 s): ready again now.
    wait_until(
        lambda: channel_stats(nsqd, "held", "c")["depth"] == 3, timeout=5, message="back in depth"
    )
    stats = channel_stats(nsqd, "held", "c")
    assert stats["requeue_count"] == 3 and stats["timeout_count"] == 0, stats
