"""The drop-in has pynsq's public names, with pynsq's signatures and bytes.

pynsq (module ``nsq``) is installed in the test environment; every public
name of it that the drop-in provides is compared with ``inspect.signature``
(annotations aside) and called with the same arguments.
"""

from __future__ import annotations

import inspect
import struct
from typing import Any

import nsq as pynsq
import pytest

from gnsqlite import nsq
from gnsqlite.errors import BadTopicError, BrokenConnectionError, InvalidNameError

#: pynsq names the drop-in leaves out: none (test_nsq_modules.py checks every module).
NOT_PROVIDED: set[str] = set()
#: Its default user_agent names gnsqlite, not pynsq; test_nsq_modules.py
#: compares its parameters.
OWN_DEFAULTS = {"AsyncConn"}
#: In pynsq's protocol module but not its ``__all__``.
EXTRA_PYNSQ = ["dpub", "auth", "SendError", "ConnectionClosedError", "IntegrityError"]
CLASSES_WITH_METHODS = {
    "Reader": [
        "set_message_handler",
        "is_starved",
        "set_max_in_flight",
        "connect_to_nsqd",
        "query_lookupd",
        "process_message",
        "giving_up",
        "preprocess_message",
        "validate_message",
        "disabled",
        "close",
    ],
    "Writer": ["pub", "mpub", "dpub"],
    "Message": ["enable_async", "is_async", "has_responded", "finish", "touch"],
}


def plain(signature: inspect.Signature) -> inspect.Signature:
    empty = inspect.Parameter.empty
    return signature.replace(
        parameters=[p.replace(annotation=empty) for p in signature.parameters.values()],
        return_annotation=empty,
    )


def pynsq_object(name: str) -> Any:
    return getattr(pynsq, name, None) or getattr(pynsq.protocol, name)


def public_names() -> list[str]:
    return [n for n in pynsq.__all__ if n not in NOT_PROVIDED] + EXTRA_PYNSQ


def test_every_public_name_of_pynsq_is_provided() -> None:
    missing = [name for name in public_names() if not hasattr(nsq, name)]
    assert missing == []
    assert set(nsq.__all__) >= set(public_names())


@pytest.mark.parametrize("name", [n for n in public_names() if n not in OWN_DEFAULTS])
def test_signatures_match_pynsq(name: str) -> None:
    theirs, ours = pynsq_object(name), getattr(nsq, name)
    if not callable(theirs):
        assert ours == theirs
        return
    if isinstance(theirs, type) and issubclass(theirs, BaseException):
        assert issubclass(ours, nsq.Error)
        return
    assert plain(inspect.signature(ours)) == inspect.signature(theirs)


@pytest.mark.parametrize(
    ("cls", "method"), [(c, m) for c, methods in CLASSES_WITH_METHODS.items() for m in methods]
)
def test_methods_accept_every_pynsq_call(cls: str, method: str) -> None:
    """Same parameters in the same order; ours may add optional ones after them."""
    theirs = list(inspect.signature(getattr(getattr(pynsq, cls), method)).parameters.values())
    ours = list(plain(inspect.signature(getattr(getattr(nsq, cls), method))).parameters.values())
    assert ours[: len(theirs)] == theirs
    assert all(p.default is not inspect.Parameter.empty for p in ours[len(theirs) :])


def test_requeue_takes_pynsq_keywords() -> None:
    params = inspect.signature(nsq.Message.requeue).parameters
    assert {"backoff", "delay", "time_ms"} <= set(params)
    message = nsq.Message(b"0" * 16, b"x", 1, 1)
    assert message.requeue(backoff=False, delay=2) is True
    assert message.has_responded() and message.requeue() is False


MESSAGE_ID = b"0123456789abcdef"
CALLS: list[tuple[str, tuple[Any, ...]]] = [
    ("identify", ({"client_id": "a", "heartbeat_interval": 30000},)),
    ("auth", (b"secret",)),
    ("subscribe", ("clicks", "archive")),
    ("ready", (100,)),
    ("finish", (MESSAGE_ID,)),
    ("finish", (MESSAGE_ID.decode(),)),
    ("requeue", (MESSAGE_ID,)),
    ("requeue", (MESSAGE_ID, 1500)),
    ("touch", (MESSAGE_ID,)),
    ("nop", ()),
    ("pub", ("clicks", b"hello")),
    ("mpub", ("clicks", [b"a", b"bc"])),
    ("dpub", ("clicks", 2500, b"later")),
    ("valid_topic_name", ("clicks#ephemeral",)),
    ("valid_topic_name", ("bad topic",)),
    ("valid_channel_name", ("x" * 65,)),
]


@pytest.mark.parametrize(("name", "args"), CALLS)
def test_helpers_build_the_same_bytes_as_pynsq(name: str, args: tuple[Any, ...]) -> None:
    assert getattr(nsq, name)(*args) == pynsq_object(name)(*args)


def test_decoding_matches_pynsq() -> None:
    data = struct.pack(">qH", 1_700_000_000_000_000_000, 3) + MESSAGE_ID + b"body"
    ours, theirs = nsq.decode_message(data), pynsq.decode_message(data)
    for attr in ("id", "body", "timestamp", "attempts"):
        assert getattr(ours, attr) == getattr(theirs, attr)
    frame = struct.pack(">l", nsq.FRAME_TYPE_MESSAGE) + data
    assert nsq.unpack_response(frame) == pynsq.unpack_response(frame)


def test_invalid_names_raise_instead_of_going_out() -> None:
    with pytest.raises(InvalidNameError):
        nsq.pub("bad topic", b"x")


def test_errors_keep_the_gnsqlite_cause() -> None:
    from gnsqlite.nsq.errors import as_nsq_error

    server = as_nsq_error(BadTopicError("PUB topic name 'x y' is not valid"))
    assert type(server) is nsq.Error
    assert server.args == (b"E_BAD_TOPIC PUB topic name 'x y' is not valid",)
    closed = as_nsq_error(BrokenConnectionError("127.0.0.1:4150", "lost"))
    assert isinstance(closed, nsq.ConnectionClosedError)
    assert isinstance(closed.__cause__, BrokenConnectionError)
    send = nsq.SendError("no open connections")
    assert str(send) == str(pynsq.protocol.SendError("no open connections"))


def test_unknown_keywords_raise_type_error_naming_them() -> None:
    with pytest.raises(TypeError, match=r"'heartbeat_intervall'.*'heartbeat_interval'"):
        nsq.Reader("t", "c", nsqd_tcp_addresses=["127.0.0.1:1"], heartbeat_intervall=5)
    with pytest.raises(TypeError, match="'max_in_flight'"):
        nsq.Writer(["127.0.0.1:1"], max_in_flight=3)
    with pytest.raises(TypeError, match="tls_options: unknown key 'verify'"):
        nsq.Writer(["127.0.0.1:1"], tls_options={"verify": False})


def test_connection_keywords_use_pynsq_units() -> None:
    reader = nsq.Reader(
        "t",
        "c",
        nsqd_tcp_addresses="127.0.0.1:1",
        heartbeat_interval=5,  # seconds
        output_buffer_timeout=100,  # milliseconds
        output_buffer_size=0,  # nsqd's default
        msg_timeout=45.5,  # seconds, a float is fine
        requeue_delay=7,  # seconds
        timeout=2.5,
        lookupd_poll_interval=0.5,
        max_tries=0,
    )
    config = reader.consumer.connection_config
    assert config.heartbeat_interval == 5
    assert config.output_buffer_timeout == pytest.approx(0.1)
    assert config.output_buffer_size == 16384
    assert config.msg_timeout == 45.5
    assert config.connect_timeout == 2.5
    assert reader.consumer.config.requeue_delay == 7
    assert reader.consumer.config.max_attempts == 0
    assert reader.consumer.config.lookupd_poll_interval == 0.5
    assert reader.name == "t:c" and reader.max_in_flight == 1
    disabled = nsq.Writer("127.0.0.1:1", output_buffer_timeout=-1, heartbeat_interval=-1)
    assert disabled.producer.connection_config.output_buffer_timeout is None
    assert disabled.producer.connection_config.heartbeat_interval is None
    reader.close()
    disabled.close()
