"""Coroutine handlers, awaitable publishes, a program on tornado's own IOLoop, and the
low-level pieces (AsyncConn, SyncConn, heartbeat hook, message events), against a live nsqd."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gevent
import gevent.event
import greenlet
import pytest
import tornado.gen
from nsq_support import Program, channel_stats, drained

from gnsqlite import nsq
from gnsqlite.http import NsqdHTTPClient
from gnsqlite.testing import NsqdServer, wait_until

CHANNEL = "ch"
pytestmark = pytest.mark.usefixtures("closes_dropin_clients")


def publish(server: NsqdServer, topic: str, bodies: list[bytes]) -> None:
    NsqdHTTPClient(server.http_address).mpub(topic, bodies)


def reader(server: NsqdServer, topic: str, handler: Any, **kw: Any) -> nsq.Reader:
    kw.setdefault("max_in_flight", 5)
    kw.setdefault("requeue_delay", 0)
    kw.setdefault("max_backoff_duration", 0.1)
    r = nsq.Reader(topic, CHANNEL, handler, nsqd_tcp_addresses=[server.tcp_address], **kw)
    r.start()
    return r


@pytest.fixture(params=["as found", "after asyncio.run", "its loop closed"])
def thread_loop(request: pytest.FixtureRequest) -> Iterator[str]:
    """The main thread's asyncio state the program left before it uses the drop-in.

    ``asyncio.run()`` leaves the thread with no current loop, and a program may
    close its loop (``IOLoop.close()``): pynsq's ``IOLoop.current()`` makes a new
    one then, and so must the drop-in.
    """

    async def nothing() -> None:
        pass

    if request.param == "after asyncio.run":
        asyncio.run(nothing())
    elif request.param == "its loop closed":
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop.close()
    yield request.param


def test_coroutine_handlers_are_awaited_and_their_result_decides(
    nsqd: NsqdServer, thread_loop: str
) -> None:
    """pynsq: a Future or coroutine resolving truthy finishes; False or an exception requeues."""
    topic = "coro"
    publish(nsqd, topic, [b"gen-true", b"gen-false", b"async-true", b"async-false", b"async-raise"])
    seen: dict[bytes, list[int]] = {}

    @tornado.gen.coroutine
    def gen_handler(message: nsq.Message) -> Any:
        yield tornado.gen.sleep(0.01)
        return message.attempts > 1 or message.body == b"gen-true"

    async def async_handler(message: nsq.Message) -> bool:
        await tornado.gen.sleep(0.01)
        if message.body == b"async-raise" and message.attempts == 1:
            raise RuntimeError("fails once")
        return message.attempts > 1 or message.body == b"async-true"

    def handler(message: nsq.Message) -> Any:
        seen.setdefault(message.body, []).append(message.attempts)
        if message.body.startswith(b"gen"):
            return gen_handler(message)
        return async_handler(message)

    reader(nsqd, topic, handler)
    # Eight handler calls (five firsts, three retries), then nothing left: nsqd's stats can
    # show a REQ's message neither in flight nor deferred for an instant, so drained alone
    # may come before the retries.
    wait_until(
        lambda: sum(map(len, seen.values())) >= 8 and drained(nsqd, topic, CHANNEL), timeout=20
    )
    assert seen == {
        b"gen-true": [1],
        b"gen-false": [1, 2],
        b"async-true": [1],
        b"async-false": [1, 2],
        b"async-raise": [1, 2],
    }
    assert channel_stats(nsqd, topic, CHANNEL)["requeue_count"] == 3


def test_a_coroutine_that_answers_itself_is_not_answered_again(nsqd: NsqdServer) -> None:
    topic = "coro_self"
    publish(nsqd, topic, [b"a"])
    attempts: list[int] = []

    async def handler(message: nsq.Message) -> bool:
        attempts.append(message.attempts)
        message.finish()
        return False  # already answered: no REQ follows

    reader(nsqd, topic, handler)
    wait_until(lambda: drained(nsqd, topic, CHANNEL) and attempts, timeout=10)
    stats = channel_stats(nsqd, topic, CHANNEL)
    assert attempts == [1] and stats["requeue_count"] == 0


def test_pub_is_awaitable_and_fails_when_the_publish_fails(
    nsqd: NsqdServer, thread_loop: str
) -> None:
    topic = "awaited"
    writer = nsq.Writer([nsqd.tcp_address])
    outcomes: list[Any] = []

    async def publish_twice() -> None:
        outcomes.append(await writer.pub(topic, b"one"))
        outcomes.append(await writer.mpub(topic, [b"two", b"three"]))

    writer.start()
    wait_until(lambda: writer.conns, timeout=10)
    from gnsqlite.nsq import tornado_bridge

    tornado_bridge.resolve(publish_twice())
    assert outcomes == [b"OK", b"OK"]
    assert nsqd.topic_stats(topic)["message_count"] == 3
    writer.close()

    async def publish_closed() -> Any:
        return await writer.pub(topic, b"lost")

    with pytest.raises(nsq.SendError, match="no open connections"):
        tornado_bridge.resolve(publish_closed())
    result = writer.pub(topic, b"lost too")
    assert result.done() and isinstance(result.exception(), nsq.SendError)


def test_pub_from_a_coroutine_handler(nsqd: NsqdServer) -> None:
    writer = nsq.Writer([nsqd.tcp_address])
    writer.start()
    answers: list[bytes] = []

    async def forward(message: nsq.Message) -> bool:
        answers.append(await writer.pub("forwarded", message.body))
        return True

    publish(nsqd, "incoming", [b"x", b"y"])
    reader(nsqd, "incoming", forward)
    wait_until(lambda: len(answers) == 2, timeout=10)
    assert answers == [b"OK", b"OK"]
    wait_until(lambda: nsqd.topic_stats("forwarded")["message_count"] == 2, timeout=10)


IOLOOP_PROGRAM = """
import tornado.ioloop
from gnsqlite import nsq

loop = tornado.ioloop.IOLoop.current()
received = []
writer = nsq.Writer([{address!r}])

def handler(message):
    received.append(message.body)
    print("received", message.body.decode(), flush=True)
    if len(received) == 3:
        loop.call_later(0.1, loop.stop)
    return True

reader = nsq.Reader("ioloop", "ch", handler, nsqd_tcp_addresses=[{address!r}])
sent = []

def publish():
    if len(sent) < 3 and writer.conns:
        writer.pub("ioloop", str(len(sent)).encode(), callback=lambda c, data: print("pub", data))
        sent.append(1)

tornado.ioloop.PeriodicCallback(publish, 50).start()
loop.call_later(30, loop.stop)
loop.start()   # the program runs tornado's loop itself: no nsq.run()
print("done", sorted(received), flush=True)
"""


def test_a_program_that_runs_the_ioloop_itself(nsqd: NsqdServer, tmp_path: Path) -> None:
    program = Program(IOLOOP_PROGRAM.format(address=nsqd.tcp_address), tmp_path)
    try:
        program.wait_for(lambda lines: any(line.startswith("done") for line in lines), timeout=40)
    finally:
        program.kill()
    assert "done [b'0', b'1', b'2']" in program.lines, program.output
    assert program.lines.count("pub b'OK'") == 3


def test_the_heartbeat_hook_runs_for_each_heartbeat(nsqd: NsqdServer) -> None:
    beats: list[str] = []
    beat = gevent.event.Event()

    class Watched(nsq.Reader):
        def heartbeat(self, conn: Any) -> None:
            beats.append(conn.id)
            beat.set()

    Watched(
        "beats",
        CHANNEL,
        lambda m: True,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        heartbeat_interval=1,
    ).start()
    assert beat.wait(timeout=10)
    assert beats[0] == nsqd.tcp_address


def test_close_stops_a_heartbeat_hook_still_running(nsqd: NsqdServer) -> None:
    entered = gevent.event.Event()
    hooks: list[greenlet.greenlet] = []

    class Stuck(nsq.Reader):
        def heartbeat(self, conn: Any) -> None:
            hooks.append(gevent.getcurrent())
            entered.set()
            gevent.sleep(3600)  # a hook that never returns by itself

    reader = Stuck(
        "stuck",
        CHANNEL,
        lambda m: True,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        heartbeat_interval=1,
    )
    reader.start()
    assert entered.wait(timeout=10)
    reader.close(timeout=5)
    assert hooks and all(hook.dead for hook in hooks)


def test_asyncconn_fires_pynsq_events_and_answers_messages(nsqd: NsqdServer) -> None:
    topic = "asyncconn"
    publish(nsqd, topic, [b"finish-me", b"requeue-me"])
    events: list[str] = []
    messages: list[nsq.Message] = []
    responses: list[bytes] = []
    host, port = nsqd.tcp_address.rsplit(":", 1)
    conn = nsq.AsyncConn(host, int(port))
    for name in ("connect", "identify", "identify_response", "ready", "resume", "backoff", "close"):
        conn.on(name, lambda name=name, **_: events.append(name))
    conn.on("response", lambda conn, data: responses.append(data))

    def ready(conn: nsq.AsyncConn) -> None:
        conn.send(nsq.subscribe(topic, CHANNEL))
        conn.send_rdy(2)

    def message(conn: nsq.AsyncConn, message: nsq.Message) -> None:
        messages.append(message)
        if message.body == b"finish-me":
            message.finish()
        elif message.attempts == 1:
            message.requeue(time_ms=0)
        else:
            message.finish()

    conn.on("ready", ready)
    conn.on("message", message)
    conn.connect()
    wait_until(lambda: len(messages) == 3 and drained(nsqd, topic, CHANNEL), timeout=10)
    assert events[:4] == ["connect", "identify", "identify_response", "ready"]
    assert events.count("resume") == 2 and events.count("backoff") == 1
    assert responses == [b"OK"] and conn.in_flight == 0 and conn.connected()
    assert conn.last_rdy == 2 and conn.max_rdy_count > 0
    conn.close()
    wait_until(lambda: "close" in events and conn.closed(), timeout=10)


def test_asyncconn_reports_a_refused_connection(nsqd: NsqdServer) -> None:
    errors: list[Any] = []
    closed = gevent.event.Event()
    conn = nsq.AsyncConn("127.0.0.1", 1, timeout=1.0)
    conn.on("error", lambda conn, error: errors.append(error))
    conn.on("close", lambda conn: closed.set())
    conn.connect()
    assert closed.wait(timeout=10)
    assert isinstance(errors[0], nsq.Error) and conn.closed()


def test_syncconn_speaks_the_protocol_by_hand(nsqd: NsqdServer) -> None:
    host, port = nsqd.tcp_address.rsplit(":", 1)
    publish(nsqd, "bytes", [b"hand"])
    conn = nsq.SyncConn(timeout=5.0)
    conn.connect(host, int(port))
    conn.send(nsq.identify({"feature_negotiation": True}))
    frame, data = nsq.unpack_response(conn.read_response())
    assert frame == nsq.FRAME_TYPE_RESPONSE and "max_rdy_count" in json.loads(data)
    conn.send(nsq.subscribe("bytes", CHANNEL))
    assert nsq.unpack_response(conn.read_response()) == (nsq.FRAME_TYPE_RESPONSE, b"OK")
    conn.send(nsq.ready(1))
    frame, data = nsq.unpack_response(conn.read_response())
    assert frame == nsq.FRAME_TYPE_MESSAGE
    message = nsq.decode_message(data)
    assert message.body == b"hand" and message.attempts == 1
    conn.send(nsq.finish(message.id))
    wait_until(lambda: drained(nsqd, "bytes", CHANNEL), timeout=10)
    conn.close()


def test_message_events_and_conn_kwargs() -> None:
    finished: list[nsq.Message] = []
    requeued: list[dict[str, Any]] = []
    message = nsq.Message(b"0" * 16, b"body", 1, 1)
    message.on(nsq.event.FINISH, lambda message: finished.append(message))
    assert message.finish() and finished == [message]
    other = nsq.Message(b"1" * 16, b"body", 1, 2)
    other.on(nsq.event.REQUEUE, lambda message, **kw: requeued.append(kw))
    other.requeue(backoff=False, delay=2)
    assert requeued == [{"backoff": False, "time_ms": 2000}]
    with pytest.raises(nsq.event.DuplicateListenerError):
        fin = finished.append
        message.on("x", fin)
        message.on("x", fin)
    r = nsq.Reader("t", "c", print, nsqd_tcp_addresses=["127.0.0.1:1"], heartbeat_interval=5)
    w = nsq.Writer(["127.0.0.1:1"], snappy=True)
    assert r.conn_kwargs == {"heartbeat_interval": 5} and w.conn_kwargs == {"snappy": True}
