"""pynsq's README programs with ``import nsq`` changed to ``from gnsqlite import nsq``.

Each program is run as pynsq's README writes it (only the addresses point at
the test brokers), against the embedded broker or a real nsqd, and stopped
with the signal a user would send.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

from nsq_support import Program, channel_stats, drained, topic_stats

from gnsqlite.http import NsqdHTTPClient
from gnsqlite.testing import LookupdServer, NsqdServer, wait_until

READER = """\
from gnsqlite import nsq

def handler(message):
    print(message)
    return True

r = nsq.Reader(message_handler=handler,
        lookupd_http_addresses=['http://{lookupd}'],
        topic='nsq_reader', channel='asdf', lookupd_poll_interval=15)
nsq.run()
"""

ASYNC_READER = """\
from gnsqlite import nsq

buf = []

def process_message(message):
    global buf
    message.enable_async()
    # cache the message for later processing
    buf.append(message)
    if len(buf) >= 3:
        for msg in buf:
            print(msg)
            msg.finish()
        buf = []
    else:
        print('deferring processing')

r = nsq.Reader(message_handler=process_message,
        lookupd_http_addresses=['http://{lookupd}'],
        topic='nsq_reader', channel='async', max_in_flight=9)
nsq.run()
"""

WRITER = """\
from gnsqlite import nsq
import tornado.ioloop
import time

def pub_message():
    writer.pub('test', time.strftime('%H:%M:%S'), finish_pub)

def finish_pub(conn, data):
    print(data)

writer = nsq.Writer(['{nsqd}'])
tornado.ioloop.PeriodicCallback(pub_message, 1000).start()
nsq.run()
"""


def registered_nsqd(
    nsqlookupd: LookupdServer, nsqd_factory: Callable[..., NsqdServer], bodies: list[bytes]
) -> NsqdServer:
    server = nsqd_factory(lookupd=nsqlookupd)
    NsqdHTTPClient(server.http_address).mpub("nsq_reader", bodies)
    wait_until(
        lambda: nsqlookupd.http.producer_addresses("nsq_reader") != [],
        timeout=10,
        message="nsqd registered the topic with lookupd",
    )
    return server


def test_reader_program(
    nsqlookupd: LookupdServer,
    nsqd_factory: Callable[..., NsqdServer],
    programs: Callable[[str], Program],
) -> None:
    bodies = [b"hello %d" % i for i in range(20)]
    server = registered_nsqd(nsqlookupd, nsqd_factory, bodies)
    program = programs(READER.format(lookupd=nsqlookupd.http_address))
    program.wait_for(lambda lines: sum("nsq.Message" in line for line in lines) == 20)
    for body in bodies:
        assert program.count(repr(body)) == 1, program.output
    wait_until(lambda: drained(server, "nsq_reader", "asdf"), timeout=10)
    assert program.stop(signal.SIGINT) == 0, program.output
    assert "Traceback" not in program.output


def test_async_reader_program(
    nsqlookupd: LookupdServer,
    nsqd_factory: Callable[..., NsqdServer],
    programs: Callable[[str], Program],
) -> None:
    bodies = [b"async %d" % i for i in range(9)]
    server = registered_nsqd(nsqlookupd, nsqd_factory, bodies)
    program = programs(ASYNC_READER.format(lookupd=nsqlookupd.http_address))
    program.wait_for(lambda lines: sum("nsq.Message" in line for line in lines) == 9)
    assert program.count("deferring processing") == 6
    wait_until(lambda: drained(server, "nsq_reader", "async"), timeout=10)
    stats: dict[str, Any] = channel_stats(server, "nsq_reader", "async")
    assert stats["message_count"] == 9 and stats["requeue_count"] == 0
    assert program.stop(signal.SIGTERM) == 0, program.output


def test_writer_program_with_a_tornado_periodic_callback(
    nsqd: NsqdServer, programs: Callable[[str], Program]
) -> None:
    program = programs(WRITER.format(nsqd=nsqd.tcp_address))
    program.wait_for(lambda lines: lines.count("b'OK'") >= 2, timeout=20)
    assert program.stop(signal.SIGTERM) == 0, program.output
    published = program.count("b'OK'")
    assert topic_stats(nsqd, "test")["message_count"] == published
    assert "Traceback" not in program.output
