"""Golden bytes for every command, laid out as the protocol spec draws them."""

from __future__ import annotations

import json
import struct

import pytest

import gnsqlite.protocol as p
from gnsqlite.errors import InvalidNameError, LocalProtocolError
from gnsqlite.protocol.commands import Body

pytestmark = pytest.mark.no_server

MSG_ID = b"0123456789abcdef"


def size(n: int) -> bytes:
    """A 4-byte big-endian size, as the spec writes ``[ 4-byte size in bytes ]``."""
    return struct.pack(">I", n)


def test_magic_is_two_spaces_v2() -> None:
    assert p.MAGIC_V2 == b"  V2"
    assert len(p.MAGIC_V2) == 4


def test_identify_is_size_prefixed_json() -> None:
    data = p.identify({"client_id": "c", "feature_negotiation": True})
    body = b'{"client_id":"c","feature_negotiation":true}'
    assert data == b"IDENTIFY\n" + size(len(body)) + body
    assert json.loads(data[13:]) == {"client_id": "c", "feature_negotiation": True}


def test_auth_carries_the_secret_as_a_body() -> None:
    assert p.auth(b"s3cret") == b"AUTH\n" + size(6) + b"s3cret"
    assert p.auth("s3cret") == p.auth(b"s3cret")


def test_sub() -> None:
    assert p.sub("clicks", "archive") == b"SUB clicks archive\n"
    assert p.sub("t#ephemeral", "c#ephemeral") == b"SUB t#ephemeral c#ephemeral\n"


def test_pub() -> None:
    assert p.pub("clicks", b"hi") == b"PUB clicks\n\x00\x00\x00\x02hi"
    assert p.pub("clicks", "hé") == b"PUB clicks\n" + size(3) + "hé".encode()
    assert p.pub("clicks", b"") == b"PUB clicks\n" + size(0)


def test_mpub_body_size_counts_the_count_and_every_size_prefix() -> None:
    data = p.mpub("clicks", [b"a", b"bc"])
    inner = size(2) + size(1) + b"a" + size(2) + b"bc"
    assert data == b"MPUB clicks\n" + size(len(inner)) + inner
    assert len(inner) == 4 + (4 + 1) + (4 + 2)


def test_mpub_takes_str_bytearray_and_memoryview_bodies_like_bytes() -> None:
    bodies: list[Body] = ["é", bytearray(b"xy"), memoryview(b"z"), b"w" * 300]
    data = p.mpub("clicks", bodies)
    inner = size(4) + size(2) + "é".encode() + size(2) + b"xy" + size(1) + b"z"
    inner += size(300) + b"w" * 300
    assert data == b"MPUB clicks\n" + size(len(inner)) + inner
    assert p.mpub_body([b"a", b"bc"]) == size(2) + size(1) + b"a" + size(2) + b"bc"


def test_mpub_body_of_equal_sizes_is_the_same_bytes_as_the_general_form() -> None:
    bodies = [b"%03d" % i for i in range(100)]
    assert p.mpub_body(bodies, 3) == p.mpub_body(bodies)
    assert p.mpub_body([b"x"], 1) == size(1) + size(1) + b"x"
    assert p.mpub_body(bodies, 3)[:11] == size(100) + size(3) + b"000"


def test_mpub_command_is_the_header_then_the_body_for_equal_and_mixed_sizes() -> None:
    from gnsqlite.protocol import commands

    for bodies in ([b"%03d" % i for i in range(100)], [b"a", b"bc", b"def"], [b"x"]):
        body = p.mpub_body(bodies)
        whole = b"MPUB clicks\n" + size(len(body)) + body
        assert commands.mpub_command("clicks", bodies) == whole
        assert commands.mpub_encoded("clicks", body) == whole
        if len(set(map(len, bodies))) == 1:
            assert commands.mpub_command("clicks", bodies, len(bodies[0])) == whole
    with pytest.raises(LocalProtocolError, match="at least one"):
        commands.mpub_command("clicks", [], 3)
    with pytest.raises(InvalidNameError):
        commands.mpub_command("not valid!", [b"x"], 1)


def test_remembering_valid_names_never_lets_an_invalid_one_through() -> None:
    # Valid names are remembered; an invalid one is refused every time.
    assert p.check_topic_name("remembered") == "remembered"
    assert p.check_topic_name("remembered") == "remembered"
    for _ in range(2):
        with pytest.raises(InvalidNameError):
            p.check_topic_name("not valid!")


def test_mpub_of_nothing_is_refused_locally() -> None:
    with pytest.raises(LocalProtocolError, match="at least one"):
        p.mpub("clicks", [])


def test_dpub_takes_seconds_and_sends_milliseconds() -> None:
    assert p.dpub("clicks", 1.5, b"x") == b"DPUB clicks 1500\n" + size(1) + b"x"
    assert p.dpub("clicks", 0, b"x").startswith(b"DPUB clicks 0\n")


def test_rdy_fin_req_touch_cls_nop() -> None:
    assert p.rdy(100) == b"RDY 100\n"
    assert p.rdy(0) == b"RDY 0\n"
    assert p.fin(MSG_ID) == b"FIN " + MSG_ID + b"\n"
    assert p.fin(MSG_ID.decode()) == p.fin(MSG_ID)
    assert p.req(MSG_ID) == b"REQ " + MSG_ID + b" 0\n"
    assert p.req(MSG_ID, 2.0) == b"REQ " + MSG_ID + b" 2000\n"
    assert p.touch(MSG_ID) == b"TOUCH " + MSG_ID + b"\n"
    assert p.cls() == b"CLS\n"
    assert p.nop() == b"NOP\n"


def test_fin_many_is_the_fins_of_every_id_in_one_bytes() -> None:
    from gnsqlite.protocol.commands import fin_many

    ids = [b"%016d" % n for n in range(3)]
    assert fin_many(ids) == b"".join(p.fin(i) for i in ids)
    assert fin_many([ids[0].decode(), ids[1]]) == p.fin(ids[0]) + p.fin(ids[1])  # str ids too
    assert fin_many([]) == b""
    for bad in ([ids[0], b"short"], [b"0123456789abcde", b"0123456789abcdef0"]):
        with pytest.raises(LocalProtocolError, match="16 bytes"):
            fin_many(bad)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_rdy_rejects_non_counts(bad: object) -> None:
    with pytest.raises(LocalProtocolError, match="RDY count"):
        p.rdy(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [b"short", b"0123456789abcdef0", ""])
def test_message_ids_must_have_16_bytes(bad: bytes) -> None:
    for build in (p.fin, p.touch, p.req):
        with pytest.raises(LocalProtocolError, match="16 bytes"):
            build(bad)


@pytest.mark.parametrize("delay", [-1.0, float("nan")])
def test_negative_delays_are_refused(delay: float) -> None:
    with pytest.raises(LocalProtocolError, match="0 or more seconds"):
        p.req(MSG_ID, delay)
    with pytest.raises(LocalProtocolError, match="0 or more seconds"):
        p.dpub("t", delay, b"x")


def test_bodies_must_be_bytes_or_str() -> None:
    with pytest.raises(TypeError, match="bytes or str, not int"):
        p.pub("t", 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not dict"):
        p.mpub("t", [b"ok", {}])  # type: ignore[list-item]


def test_invalid_names_raise_before_anything_is_built() -> None:
    with pytest.raises(InvalidNameError, match=r"\[\.a-zA-Z0-9_-\]"):
        p.pub("bad topic!", b"x")
    with pytest.raises(InvalidNameError, match="channel name"):
        p.sub("good", "bad/channel")
    with pytest.raises(InvalidNameError, match="topic name"):
        p.mpub("", [b"x"])
    with pytest.raises(InvalidNameError):
        p.dpub("x" * 65, 1.0, b"x")
