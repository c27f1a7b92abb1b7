"""The golden scripts: raw-byte sessions whose answers are recorded from the real nsqd.

Each :class:`~record.Script` is data: the bytes to send and what to read. The
topic names start with the script's name so scripts sharing a server do not
see each other's state. Add a script here, record it with ``record.py
--nsqd-bin DIR -k NAME`` and commit the new file under ``recordings/``.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from record import Connect, Http, Quiet, Read, Script, Send, UntilClosed, Upgrade, WaitHttp

__all__ = ["SCRIPTS"]


def body(data: bytes) -> bytes:
    """A size-prefixed body."""
    return struct.pack(">i", len(data)) + data


def cmd(line: str, data: bytes | None = None) -> bytes:
    """A command line, with a size-prefixed body when ``data`` is given."""
    return line.encode() + b"\n" + (body(data) if data is not None else b"")


def identify(**fields: Any) -> bytes:
    """``IDENTIFY`` with a fixed client id, hostname and user agent unless given."""
    fields.setdefault("client_id", "golden")
    fields.setdefault("hostname", "golden.example")
    fields.setdefault("user_agent", "golden/1.0")
    return cmd("IDENTIFY", json.dumps(fields).encode())


def mpub(*bodies: bytes) -> bytes:
    """An MPUB body: count, then each size-prefixed message."""
    return struct.pack(">i", len(bodies)) + b"".join(body(b) for b in bodies)


def fatal(conn: str, *data: bytes) -> list[Any]:
    """Open ``conn``, send ``data`` and read until nsqd closes it."""
    return [Connect(conn), *(Send(d, conn) for d in data), UntilClosed(conn)]


def answered(conn: str, *data: bytes) -> list[Any]:
    """Open ``conn``, send ``data`` and read one frame per item, then expect quiet."""
    return [
        Connect(conn),
        *(s for d in data for s in (Send(d, conn), Read(1, conn))),
        Quiet(0.2, conn),
    ]


def subscribed(topic: str, channel: str = "ch", conn: str = "c") -> list[Any]:
    """Open ``conn``, IDENTIFY and SUB (reading both answers)."""
    return [
        Connect(conn),
        Send(identify(), conn),
        Read(1, conn),
        Send(cmd(f"SUB {topic} {channel}"), conn),
        Read(1, conn),
    ]


TCP = [
    Script(
        "bad_magic",
        [Connect(magic=False), Send(b"  V1"), UntilClosed()],
        doc="a wrong protocol magic",
    ),
    Script("invalid_command", fatal("c", b"FOO bar\n"), doc="an unknown command"),
    Script(
        "nop_before_identify",
        [Connect(), Send(b"NOP\n"), Quiet()],
        doc="NOP is answered by nothing",
    ),
    # IDENTIFY
    Script("identify_plain", answered("c", identify()), doc="IDENTIFY without negotiation"),
    Script(
        "identify_negotiation",
        answered(
            "c",
            identify(
                feature_negotiation=True,
                msg_timeout=2000,
                output_buffer_size=128,
                output_buffer_timeout=100,
                sample_rate=10,
                heartbeat_interval=5000,
            ),
        ),
        doc="IDENTIFY with feature_negotiation answers JSON",
    ),
    Script("identify_twice", answered("c", identify(), identify()), doc="a second IDENTIFY"),
    Script(
        "identify_bad_json",
        fatal("a", cmd("IDENTIFY", b"{not json"))
        + fatal("b", cmd("IDENTIFY", b'{"heartbeat_interval": "x"}'))
        + fatal("c", cmd("IDENTIFY", b"[1, 2]")),
        doc="IDENTIFY bodies that are not nsqd's JSON",
    ),
    Script(
        "identify_body_size",
        fatal("a", b"IDENTIFY\n" + struct.pack(">i", 0))
        + fatal("b", b"IDENTIFY\n" + struct.pack(">i", -1))
        + fatal("c", b"IDENTIFY\n" + struct.pack(">i", 6 * 1024 * 1024)),
        doc="IDENTIFY body sizes out of range",
    ),
    Script(
        "identify_out_of_range",
        fatal("hb_low", identify(heartbeat_interval=999))
        + fatal("hb_high", identify(heartbeat_interval=60001))
        + fatal("obs_low", identify(output_buffer_size=63))
        + fatal("obs_high", identify(output_buffer_size=64 * 1024 + 1))
        + fatal("obt_low", identify(output_buffer_timeout=1))
        + fatal("obt_high", identify(output_buffer_timeout=30001))
        + fatal("rate", identify(sample_rate=100))
        + fatal("msg_low", identify(msg_timeout=999))
        + fatal("msg_high", identify(msg_timeout=900001)),
        doc="IDENTIFY values outside nsqd's ranges",
    ),
    Script(
        "identify_snappy_and_deflate",
        fatal("c", identify(feature_negotiation=True, snappy=True, deflate=True)),
        doc="asking for both compressions",
    ),
    Script(
        "identify_disable_heartbeats",
        [
            Connect(),
            Send(identify(heartbeat_interval=-1)),
            Read(1),
            Send(cmd("SUB identify_disable_heartbeats ch")),
            UntilClosed(),
        ],
        doc="SUB after heartbeats were disabled",
    ),
    # before IDENTIFY / SUB
    Script(
        "before_sub",
        fatal("rdy", b"RDY 1\n")
        + fatal("fin", b"FIN 0123456789abcdef\n")
        + fatal("req", b"REQ 0123456789abcdef 0\n")
        + fatal("touch", b"TOUCH 0123456789abcdef\n")
        + fatal("cls", b"CLS\n"),
        doc="commands that need a subscription, sent before SUB",
    ),
    Script(
        "pub_before_identify",
        answered("c", cmd("PUB pub_before_identify", b"x")),
        doc="PUB needs no IDENTIFY",
    ),
    Script(
        "auth_disabled",
        fatal("c", cmd("AUTH", b"secret")) + fatal("params", b"AUTH x\n" + body(b"s")),
        doc="AUTH on an nsqd without --auth-http-address",
    ),
    # PUB
    Script(
        "pub",
        answered(
            "c",
            cmd("PUB pub_t", b"hello"),
            cmd("PUB pub_t", b"\x00\xff binary"),
            cmd("PUB pub_t#ephemeral", b"e"),
        ),
        doc="PUB answers OK",
    ),
    Script(
        "pub_errors",
        fatal("noparams", b"PUB\n")
        + fatal("badtopic", cmd("PUB bad!topic", b"x"))
        + fatal("longtopic", cmd("PUB " + "t" * 65, b"x"))
        + fatal("empty", b"PUB pub_errors\n" + struct.pack(">i", 0))
        + fatal("negative", b"PUB pub_errors\n" + struct.pack(">i", -5))
        + fatal("toobig", b"PUB pub_errors\n" + struct.pack(">i", 1024 * 1024 + 1)),
        doc="PUB's errors",
    ),
    # MPUB
    Script(
        "mpub",
        answered("c", cmd("MPUB mpub_t", mpub(b"one", b"two", b"three"))),
        doc="MPUB answers OK",
    ),
    Script(
        "mpub_errors",
        fatal("noparams", b"MPUB\n")
        + fatal("badtopic", cmd("MPUB bad!topic", mpub(b"x")))
        + fatal("empty", b"MPUB mpub_errors\n" + struct.pack(">i", 0))
        + fatal("toobig", b"MPUB mpub_errors\n" + struct.pack(">i", 5 * 1024 * 1024 + 1))
        + fatal("count0", cmd("MPUB mpub_errors", struct.pack(">i", 0)))
        + fatal("countbig", cmd("MPUB mpub_errors", struct.pack(">i", 1 << 30)))
        + fatal("msg0", cmd("MPUB mpub_errors", struct.pack(">ii", 1, 0)))
        + fatal("msgbig", cmd("MPUB mpub_errors", struct.pack(">ii", 1, 1024 * 1024 + 1))),
        doc="MPUB's errors",
    ),
    Script(
        "mpub_malformed",
        # nsqd reads the messages from the stream: the declared body size only bounds the
        # size check, so a short body waits for more bytes and a long one leaves the rest
        # to be read as the next command
        [
            Connect("truncated"),
            Send(cmd("MPUB mpub_malformed", struct.pack(">ii", 1, 10) + b"abc"), "truncated"),
            Quiet(0.3, "truncated"),
            Send(b"defghij", "truncated"),
            Read(1, "truncated"),
            Connect("short"),
            Send(cmd("MPUB mpub_malformed", b"\x00\x00"), "short"),
            Quiet(0.3, "short"),
            Send(struct.pack(">hi", 1, 2) + b"xy", "short"),
            Read(1, "short"),
            Connect("nosize"),
            Send(cmd("MPUB mpub_malformed", struct.pack(">ii", 2, 1) + b"x"), "nosize"),
            Quiet(0.3, "nosize"),
            Send(body(b"second"), "nosize"),
            Read(1, "nosize"),
            Connect("trailing"),
            Send(cmd("MPUB mpub_malformed", mpub(b"a") + b"NOP\n"), "trailing"),
            Read(1, "trailing"),
            Quiet(0.3, "trailing"),
            Connect("trailing_cmd"),
            Send(cmd("MPUB mpub_malformed", mpub(b"b") + b"PUB mpub_malformed\n"), "trailing_cmd"),
            Read(1, "trailing_cmd"),
            Quiet(0.3, "trailing_cmd"),
            Send(body(b"c"), "trailing_cmd"),
            Read(1, "trailing_cmd"),
            Connect("trailing_bad"),
            Send(cmd("MPUB mpub_malformed", mpub(b"d") + b"FOO\n"), "trailing_bad"),
            UntilClosed("trailing_bad"),
            Http("GET", "/stats?format=json&topic=mpub_malformed&include_clients=false"),
        ],
        doc="MPUB bodies whose messages do not fill the declared size",
    ),
    # DPUB
    Script(
        "dpub",
        answered("c", cmd("DPUB dpub_t 1000", b"later"), cmd("DPUB dpub_t 0", b"now")),
        doc="DPUB answers OK",
    ),
    Script(
        "dpub_errors",
        fatal("noparams", b"DPUB dpub_errors\n")
        + fatal("badtopic", cmd("DPUB bad!topic 10", b"x"))
        + fatal("badtimeout", cmd("DPUB dpub_errors abc", b"x"))
        + fatal("negative", cmd("DPUB dpub_errors -1", b"x"))
        + fatal("range", cmd("DPUB dpub_errors 3600001", b"x"))
        + fatal("empty", b"DPUB dpub_errors 10\n" + struct.pack(">i", 0))
        + fatal("toobig", b"DPUB dpub_errors 10\n" + struct.pack(">i", 1024 * 1024 + 1)),
        doc="DPUB's errors",
    ),
    # SUB
    Script(
        "sub_errors",
        fatal("noparams", b"SUB sub_errors\n")
        + fatal("badtopic", b"SUB bad!topic ch\n")
        + fatal("badchannel", b"SUB sub_errors bad!channel\n")
        + fatal("longchannel", b"SUB sub_errors " + b"c" * 65 + b"\n"),
        doc="SUB's errors",
    ),
    Script(
        "sub_twice",
        [*subscribed("sub_twice"), Send(b"SUB sub_twice other\n"), UntilClosed()],
        doc="SUB on a subscribed connection",
    ),
    Script(
        "sub_without_identify",
        answered("c", b"SUB sub_without_identify ch\n"),
        doc="SUB needs no IDENTIFY",
    ),
    # messages
    Script(
        "messages",
        [
            Connect("p"),
            Send(cmd("PUB messages", b"first"), "p"),
            Read(1, "p"),
            Send(cmd("PUB messages", b"second"), "p"),
            Read(1, "p"),
            *subscribed("messages"),
            Send(b"RDY 2\n"),
            Read(2),
            Send(b"FIN <id1>\n"),
            Quiet(0.2),
            Send(b"TOUCH <id2>\n"),
            Quiet(0.2),
            Send(b"REQ <id2> 0\n"),
            Read(1),
            Send(b"FIN <id2>\n"),
            Quiet(0.2),
            Send(b"FIN <id1>\n"),
            Read(1),
            Send(b"REQ <id1> 0\n"),
            Read(1),
            Send(b"TOUCH <id1>\n"),
            Read(1),
            Send(b"FIN 0123456789abcdef\n"),
            Read(1),
            Quiet(0.2),
        ],
        doc="SUB, RDY, message frames, FIN/TOUCH/REQ and their failures",
    ),
    Script(
        "message_commands_errors",
        [
            *subscribed("message_commands_errors", conn="short"),
            Send(b"FIN 0123\n", "short"),
            UntilClosed("short"),
            *subscribed("message_commands_errors", conn="noparams"),
            Send(b"FIN\n", "noparams"),
            UntilClosed("noparams"),
            *subscribed("message_commands_errors", conn="req_params"),
            Send(b"REQ 0123456789abcdef\n", "req_params"),
            UntilClosed("req_params"),
            *subscribed("message_commands_errors", conn="req_timeout"),
            Send(b"REQ 0123456789abcdef abc\n", "req_timeout"),
            UntilClosed("req_timeout"),
            *subscribed("message_commands_errors", conn="touch_params"),
            Send(b"TOUCH\n", "touch_params"),
            UntilClosed("touch_params"),
        ],
        doc="FIN/REQ/TOUCH with bad parameters",
    ),
    Script(
        "req_clamped",
        [
            Connect("p"),
            Send(cmd("PUB req_clamped", b"x"), "p"),
            Read(1, "p"),
            *subscribed("req_clamped"),
            Send(b"RDY 1\n"),
            Read(1),
            Send(b"REQ <id1> 3600001\n"),
            Quiet(0.3),
            Http("GET", "/stats?format=json&topic=req_clamped&include_clients=false"),
        ],
        doc="REQ with a timeout above --max-req-timeout",
    ),
    Script(
        "rdy_window",
        [
            Connect("p"),
            Send(cmd("MPUB rdy_window", mpub(b"first", b"second", b"third", b"fourth")), "p"),
            Read(1, "p"),
            *subscribed("rdy_window"),
            Send(b"RDY 1\n"),  # once: never sent again for the next message
            Read(1),
            Quiet(0.2),  # one in flight fills RDY 1
            Send(b"FIN <id1>\n"),
            Read(1),  # the FIN reopened the window
            Quiet(0.2),
            Send(b"RDY 2\n"),
            Read(1),  # a window of two, one already in flight
            Quiet(0.2),
            Send(b"REQ <id2> 0\n"),
            Read(1),  # a requeue reopens it too (the requeued message queues behind "fourth")
            Quiet(0.2),
            Send(b"FIN <id3>\n"),
            Read(1),
            Quiet(0.2),
            Send(b"FIN <id2>\n"),
            Send(b"FIN <id4>\n"),
            Quiet(0.2),
            Http("GET", "/stats?format=json&topic=rdy_window&include_clients=false"),
        ],
        doc="RDY is a window (in flight < RDY), not a counter: FIN and REQ reopen it",
    ),
    Script(
        "rdy",
        [
            *subscribed("rdy"),
            Send(b"RDY 0\n"),
            Quiet(0.1),
            Send(b"RDY 2500\n"),
            Quiet(0.1),
            Send(b"RDY\n"),
            Quiet(0.1),
            Send(b"RDY 2501\n"),
            UntilClosed(),
            *subscribed("rdy", conn="word"),
            Send(b"RDY abc\n", "word"),
            UntilClosed("word"),
            *subscribed("rdy", conn="neg"),
            Send(b"RDY -1\n", "neg"),
            UntilClosed("neg"),
        ],
        doc="RDY counts in and out of range",
    ),
    Script(
        "cls",
        [
            *subscribed("cls"),
            Send(b"CLS\n"),
            Read(1),
            Send(b"RDY 1\n"),
            Quiet(0.2),
            Send(b"CLS\n"),
            UntilClosed(),
        ],
        doc="CLS answers CLOSE_WAIT; RDY after it is ignored",
    ),
    Script(
        "heartbeat",
        [
            Connect(),
            Send(identify(heartbeat_interval=1000)),
            Read(1),
            Read(1),
            Send(b"NOP\n"),
            Quiet(0.2),
        ],
        doc="a heartbeat frame after heartbeat_interval",
    ),
    # upgrades
    Script(
        "snappy",
        [
            Connect(),
            Send(identify(feature_negotiation=True, snappy=True)),
            Read(1),
            Upgrade("snappy"),
            Read(1),
            Send(cmd("PUB snappy", b"squashed")),
            Read(1),
            Send(b"SUB snappy ch\n"),
            Read(1),
            Send(b"RDY 1\n"),
            Read(1),
            Send(b"FIN <id1>\n"),
            Quiet(0.2),
        ],
        doc="the snappy upgrade as a client sees it",
    ),
    Script(
        "deflate",
        [
            Connect(),
            Send(identify(feature_negotiation=True, deflate=True, deflate_level=3)),
            Read(1),
            Upgrade("deflate", level=3),
            Read(1),
            Send(cmd("PUB deflate", b"deflated")),
            Read(1),
            Send(b"SUB deflate ch\n"),
            Read(1),
            Send(b"RDY 1\n"),
            Read(1),
            Send(b"FIN <id1>\n"),
            Quiet(0.2),
        ],
        doc="the deflate upgrade as a client sees it",
    ),
    Script(
        "tls",
        [
            Connect(),
            Send(identify(feature_negotiation=True, tls_v1=True)),
            Read(1),
            Upgrade("tls"),
            Read(1),
            Send(cmd("PUB tls", b"secret")),
            Read(1),
            Send(b"SUB tls ch\n"),
            Read(1),
            Send(b"RDY 1\n"),
            Read(1),
            Quiet(0.2),
        ],
        doc="the TLS upgrade as a client sees it",
    ),
    Script(
        "tls_snappy",
        [
            Connect(),
            Send(identify(feature_negotiation=True, tls_v1=True, snappy=True)),
            Read(1),
            Upgrade("tls"),
            Read(1),
            Upgrade("snappy"),
            Read(1),
            Send(cmd("PUB tls_snappy", b"both")),
            Read(1),
            Quiet(0.2),
        ],
        doc="TLS then snappy",
    ),
    Script(
        "max_channel_consumers",
        [
            *subscribed("max_channel_consumers", conn="first"),
            Connect("second"),
            Send(identify(), "second"),
            Read(1, "second"),
            Send(b"SUB max_channel_consumers ch\n", "second"),
            UntilClosed("second"),
            Connect("other"),
            Send(b"SUB max_channel_consumers other\n", "other"),
            Read(1, "other"),
        ],
        setup="limits",
        doc="--max-channel-consumers=1: a second consumer of the channel is refused",
    ),
]

_TOPIC = "http_topic"
HTTP_NSQD = [
    Script(
        "http_ping_info",
        [
            Http("GET", "/ping"),
            Http("GET", "/info"),
            Http("POST", "/ping"),
            Http("GET", "/nosuchpath"),
        ],
        doc="/ping, /info, a wrong method, an unknown path",
    ),
    Script(
        "http_pub",
        [
            Http("POST", "/pub?topic=http_pub", b"hello"),
            Http("PUT", "/pub?topic=http_pub", b"put"),
            Http("POST", "/pub?topic=http_pub&defer=1000", b"later"),
            Http("GET", "/pub?topic=http_pub"),
            Http("POST", "/pub", b"x"),
            Http("POST", "/pub?topic=bad!topic", b"x"),
            Http("POST", "/pub?topic=http_pub", b""),
            Http("POST", "/pub?topic=http_pub&defer=abc", b"x"),
            Http("POST", "/pub?topic=http_pub&defer=3600001", b"x"),
            Http("POST", "/pub?topic=http_pub", b"x" * (1024 * 1024 + 1)),
            Http("GET", "/stats?format=json&topic=http_pub&include_clients=false"),
        ],
        doc="/pub and its errors",
    ),
    Script(
        "http_mpub",
        [
            Http("POST", "/mpub?topic=http_mpub", b"one\ntwo\n\nthree\n"),
            Http("POST", "/mpub?topic=http_mpub&binary=true", mpub(b"b1", b"b2\n")),
            Http("POST", "/mpub?topic=http_mpub&binary=true", mpub(b"c1") + b"trailing"),
            Http("POST", "/mpub?topic=http_mpub&binary=true", struct.pack(">ii", 2, 1) + b"x"),
            Http("POST", "/mpub?topic=http_mpub&binary=true", struct.pack(">i", 0)),
            Http("POST", "/mpub?topic=http_mpub&binary=true", struct.pack(">ii", 1, 0)),
            Http("POST", "/mpub?topic=http_mpub&binary=true", b""),
            Http("POST", "/mpub?topic=http_mpub", b""),
            Http("POST", "/mpub?topic=http_mpub", b"\n\n"),
            Http("GET", "/mpub?topic=http_mpub"),
            Http("POST", "/mpub", b"x"),
            Http("GET", "/stats?format=json&topic=http_mpub&include_clients=false"),
        ],
        doc="/mpub text and binary, and its errors",
    ),
    Script(
        "http_topic_admin",
        [
            Http("POST", f"/topic/create?topic={_TOPIC}"),
            Http("POST", f"/topic/create?topic={_TOPIC}"),
            Http("GET", f"/topic/create?topic={_TOPIC}"),
            Http("POST", "/topic/create"),
            Http("POST", "/topic/create?topic=bad!topic"),
            Http("POST", f"/pub?topic={_TOPIC}", b"m"),
            Http("POST", f"/topic/pause?topic={_TOPIC}"),
            Http("GET", f"/stats?format=json&topic={_TOPIC}&include_clients=false"),
            Http("POST", f"/topic/unpause?topic={_TOPIC}"),
            Http("POST", f"/topic/empty?topic={_TOPIC}"),
            Http("GET", f"/stats?format=json&topic={_TOPIC}&include_clients=false"),
            Http("POST", "/topic/pause?topic=no_such_topic"),
            Http("POST", "/topic/unpause?topic=no_such_topic"),
            Http("POST", "/topic/empty?topic=no_such_topic"),
            Http("POST", "/topic/delete?topic=no_such_topic"),
            Http("POST", "/topic/pause"),
            Http("POST", "/topic/empty?topic=bad!topic"),
            Http("POST", f"/topic/delete?topic={_TOPIC}"),
            Http("POST", f"/topic/delete?topic={_TOPIC}"),
            Http("GET", f"/stats?format=json&topic={_TOPIC}&include_clients=false"),
        ],
        doc="topic create/pause/unpause/empty/delete and their errors",
    ),
    Script(
        "http_channel_admin",
        [
            Http("POST", "/channel/create?topic=http_channel&channel=ch"),
            Http("POST", "/channel/create?topic=http_channel&channel=ch"),
            Http("GET", "/channel/create?topic=http_channel&channel=ch"),
            Http("POST", "/channel/create?topic=http_channel"),
            Http("POST", "/channel/create?channel=ch"),
            Http("POST", "/channel/create?topic=http_channel&channel=bad!channel"),
            Http("POST", "/pub?topic=http_channel", b"m"),
            Http("POST", "/channel/pause?topic=http_channel&channel=ch"),
            Http("GET", "/stats?format=json&topic=http_channel&include_clients=false"),
            Http("POST", "/channel/unpause?topic=http_channel&channel=ch"),
            Http("POST", "/channel/empty?topic=http_channel&channel=ch"),
            Http("GET", "/stats?format=json&topic=http_channel&channel=ch"),
            Http("POST", "/channel/pause?topic=http_channel&channel=nope"),
            Http("POST", "/channel/empty?topic=http_channel&channel=nope"),
            Http("POST", "/channel/delete?topic=http_channel&channel=nope"),
            Http("POST", "/channel/delete?topic=no_such_topic&channel=ch"),
            Http("POST", "/channel/delete?topic=http_channel&channel=ch"),
            Http("GET", "/stats?format=json&topic=http_channel&include_clients=false"),
        ],
        doc="channel create/pause/unpause/empty/delete and their errors",
    ),
]

HTTP_STATS = [
    Script(
        "http_stats",
        [
            Connect("p"),
            Send(identify(), "p"),
            Read(1, "p"),
            Send(cmd("PUB stats_t", b"one"), "p"),
            Read(1, "p"),
            Send(cmd("MPUB stats_t", mpub(b"two", b"three")), "p"),
            Read(1, "p"),
            *subscribed("stats_t", "ch"),
            Send(b"RDY 1\n"),
            Read(1),
            Http("POST", "/channel/create?topic=stats_t&channel=idle#ephemeral"),
            Http("POST", "/topic/create?topic=stats_empty"),
            Http("GET", "/stats?format=json"),
            Http("GET", "/stats?format=json&topic=stats_t&channel=ch"),
            Http("GET", "/stats?format=json&include_clients=false&include_mem=false"),
            Http("GET", "/stats?format=json&topic=nope"),
            Http("POST", "/stats?format=json"),
        ],
        setup="stats",
        doc="/stats in JSON for a known state: one producer, one consumer, one in flight",
    ),
]

_REG = "lookup_t"
HTTP_LOOKUPD = [
    Script(
        "lookupd",
        [
            Http("POST", f"/channel/create?topic={_REG}&channel=ch"),
            Http("POST", f"/topic/create?topic={_REG}"),
            Http("POST", f"/channel/create?topic={_REG}&channel=ch"),
            Http("POST", f"/topic/create?topic={_REG}2"),
            WaitHttp(f"/channels?topic={_REG}", '"ch"'),
            WaitHttp("/topics", f"{_REG}2"),
            Http("GET", "/ping", server="lookupd"),
            Http("GET", "/info", server="lookupd"),
            Http("GET", f"/lookup?topic={_REG}", server="lookupd"),
            Http("GET", "/lookup?topic=nope", server="lookupd"),
            Http("GET", "/lookup", server="lookupd"),
            Http("POST", f"/lookup?topic={_REG}", server="lookupd"),
            Http("GET", "/topics", server="lookupd"),
            Http("GET", f"/channels?topic={_REG}", server="lookupd"),
            Http("GET", "/channels?topic=nope", server="lookupd"),
            Http("GET", "/channels", server="lookupd"),
            Http("GET", "/nodes", server="lookupd"),
            Http("GET", "/nosuchpath", server="lookupd"),
            Http("POST", "/topic/create?topic=lookupd_only", server="lookupd"),
            Http("POST", "/topic/create", server="lookupd"),
            Http("POST", "/topic/create?topic=bad!topic", server="lookupd"),
            Http("GET", "/topic/create?topic=x", server="lookupd"),
            Http("POST", "/channel/create?topic=lookupd_only&channel=c1", server="lookupd"),
            Http("POST", "/channel/create?topic=lookupd_only", server="lookupd"),
            Http("POST", "/channel/create?topic=lookupd_only&channel=bad!c", server="lookupd"),
            Http("GET", "/channels?topic=lookupd_only", server="lookupd"),
            Http("POST", "/channel/delete?topic=lookupd_only&channel=c1", server="lookupd"),
            Http("POST", "/channel/delete?topic=lookupd_only&channel=c1", server="lookupd"),
            Http("POST", "/topic/delete?topic=lookupd_only", server="lookupd"),
            Http("POST", "/topic/delete?topic=lookupd_only", server="lookupd"),
            Http("POST", f"/topic/tombstone?topic={_REG}2&node=x:1", server="lookupd"),
            Http("POST", f"/topic/tombstone?topic={_REG}2", server="lookupd"),
            Http("GET", "/topics", server="lookupd"),
        ],
        setup="cluster",
        doc="nsqlookupd's HTTP API with one nsqd registered",
    ),
    Script(
        "lookupd_tombstone",
        [
            Http("POST", "/topic/create?topic=tomb_t"),
            WaitHttp("/topics", "tomb_t"),
            Http("POST", "/topic/tombstone?topic=tomb_t&node={nsqd_http}", server="lookupd"),
            Http("GET", "/nodes", server="lookupd"),
            Http("GET", "/lookup?topic=tomb_t", server="lookupd"),
        ],
        setup="cluster",
        doc="a tombstoned topic in /nodes and /lookup",
    ),
]

SCRIPTS = TCP + HTTP_NSQD + HTTP_STATS + HTTP_LOOKUPD
