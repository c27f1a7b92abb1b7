"""Every public name of pynsq 0.9.1's modules is in the drop-in's module of the same name.

pynsq (module ``nsq``) is installed in the test environment. A module's
public names are those not starting with ``_``, not modules, not classes
or functions imported from elsewhere (tornado's ``IOLoop``, the standard
library's ``defaultdict``), and not pynsq's Python 2 compatibility helpers
(``from ._compat import ...``), which are no part of its API. Constants
must be equal; classes and functions exist (their behaviour is tested in
the other files).
"""

from __future__ import annotations

import importlib
import inspect
import types
from collections.abc import Callable

import nsq as pynsq
import pytest

from gnsqlite.nsq import errors as dropin_errors

MODULES = [
    "nsq",
    "nsq.protocol",
    "nsq.reader",
    "nsq.writer",
    "nsq.conn",
    "nsq.event",
    "nsq.message",
    "nsq.sync",
    "nsq.backoff_timer",
    "nsq.legacy_reader",
]
#: pynsq's ``_compat`` helpers and ``__future__`` imports, re-exported by accident.
COMPAT = {
    "absolute_import",
    "division",
    "unicode_literals",
    "bytes_types",
    "string_types",
    "integer_types",
    "iteritems",
    "itervalues",
    "func_args",
    "to_bytes",
    "struct_h",
    "struct_l",
    "struct_q",
}
#: pynsq's private base class of Reader and Writer (module nsq.client), imported into both.
NOT_API = {"Client"}


def pynsq_own(value: object) -> bool:
    if inspect.isclass(value) or inspect.isfunction(value):
        return str(getattr(value, "__module__", "")).split(".")[0] == "nsq"
    return not isinstance(value, types.ModuleType)


def public_names(module: types.ModuleType) -> list[str]:
    return sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and pynsq_own(value) and name not in COMPAT | NOT_API
    )


def dropin(module_name: str) -> types.ModuleType:
    return importlib.import_module("gnsqlite." + module_name)


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_name_is_in_the_dropin_module(module_name: str) -> None:
    theirs = importlib.import_module(module_name)
    ours = dropin(module_name)
    missing = [name for name in public_names(theirs) if not hasattr(ours, name)]
    assert missing == [], f"gnsqlite.{module_name} lacks {missing}"


@pytest.mark.parametrize("module_name", MODULES)
def test_constants_are_equal(module_name: str) -> None:
    theirs = importlib.import_module(module_name)
    ours = dropin(module_name)
    for name in public_names(theirs):
        value = getattr(theirs, name)
        if isinstance(value, (str, bytes, int)) and name != "DEFAULT_USER_AGENT":
            assert getattr(ours, name) == value, name
    if module_name == "nsq.protocol":
        assert ours.VALID_NAME_RE.pattern == theirs.VALID_NAME_RE.pattern


def test_protocol_exceptions_are_the_dropin_ones() -> None:
    """A Writer callback written against pynsq checks ``nsq.protocol.Error``."""
    from gnsqlite import nsq

    assert nsq.protocol.Error is nsq.Error
    for name in ("SendError", "ConnectionClosedError", "IntegrityError"):
        assert issubclass(getattr(nsq.protocol, name), nsq.protocol.Error)
        assert getattr(nsq.protocol, name) is getattr(nsq, name)


def test_socket_views_refuse_io_and_say_where_to_look() -> None:
    from gnsqlite.nsq import conn

    for name in ("SnappySocket", "DeflateSocket"):
        view = getattr(conn, name)("the socket")
        assert view._socket == "the socket"
        with pytest.raises(NotImplementedError, match="migrating-pynsq"):
            view.recv(10)
    for name in ("SnappyEncoder", "DeflateEncoder"):
        with pytest.raises(NotImplementedError, match="migrating-pynsq"):
            getattr(conn, name)().encode(b"x")


def plain(signature: inspect.Signature) -> inspect.Signature:
    empty = inspect.Parameter.empty
    return signature.replace(
        parameters=[p.replace(annotation=empty) for p in signature.parameters.values()],
        return_annotation=empty,
    )


@pytest.mark.parametrize("name", ["BackoffTimer", "SyncConn", "LegacyReader"])
def test_signatures_match(name: str) -> None:
    from gnsqlite import nsq

    assert plain(inspect.signature(getattr(nsq, name))) == inspect.signature(getattr(pynsq, name))


def test_asyncconn_takes_pynsq_parameters_in_order() -> None:
    from gnsqlite import nsq

    theirs = list(inspect.signature(pynsq.AsyncConn).parameters)
    ours = list(inspect.signature(nsq.AsyncConn).parameters)
    assert ours == theirs


def test_bad_arguments_are_assertion_errors_as_in_pynsq() -> None:
    """pynsq checks with assert; the drop-in's errors are AssertionErrors too."""
    from gnsqlite import nsq

    cases: list[Callable[[], object]] = [
        lambda: nsq.Reader("topic", "channel", print, nsqd_tcp_addresses=["a:1"], bogus=1),
        lambda: nsq.Reader("bad topic", "channel", print, nsqd_tcp_addresses=["a:1"]),
        lambda: nsq.Reader("topic", "channel", print),  # no address at all
        lambda: nsq.Reader("topic", "", print, nsqd_tcp_addresses=["a:1"]),
        lambda: nsq.Writer(["a:1"], bogus=1),
        lambda: nsq.AsyncConn("127.0.0.1", "4150"),  # type: ignore[arg-type]  # wrong type on purpose
        lambda: nsq.requeue(b"0" * 16, "soon"),  # type: ignore[arg-type]  # wrong type on purpose
        lambda: nsq.subscribe("t", "bad channel"),
    ]
    for case in cases:
        with pytest.raises(AssertionError) as raised:
            case()
        assert isinstance(raised.value, ValueError)  # gnsqlite's ConfigError/InvalidNameError
        assert str(raised.value)
    with pytest.raises(dropin_errors.InvalidNameArgumentError, match="'bad topic'"):
        nsq.pub("bad topic", b"x")


@pytest.mark.parametrize(
    "message_id", [b"short", "0123456789abcdef", "idé unicode", b"x" * 40, b""]
)
def test_answer_helpers_take_any_id_as_pynsq_does(message_id: bytes | str) -> None:
    from gnsqlite import nsq

    assert nsq.finish(message_id) == pynsq.finish(message_id)
    assert nsq.touch(message_id) == pynsq.touch(message_id)
    assert nsq.requeue(message_id, 1500) == pynsq.requeue(message_id, 1500)


def test_an_id_that_would_end_the_command_line_is_refused() -> None:
    from gnsqlite import nsq

    with pytest.raises(ValueError, match="newline"):
        nsq.finish(b"new\nline")


def test_protocol_bodies_are_bytes_as_in_pynsq() -> None:
    from gnsqlite import nsq

    calls: tuple[Callable[[], bytes], ...] = (
        lambda: nsq.pub("t", "text"),
        lambda: nsq.mpub("t", [b"ok", "text"]),
        lambda: nsq.mpub("t", b"not a list"),  # type: ignore[arg-type]  # wrong type on purpose
        lambda: nsq.dpub("t", 10, "text"),
    )
    for call in calls:
        with pytest.raises(AssertionError, match=r"bytes|list"):
            call()
    # nsq.pub is typed bytes | str, yet takes a bytearray as pynsq does (a library typing flaw)
    assert nsq.pub("t", bytearray(b"x")) == pynsq.pub("t", bytearray(b"x"))  # type: ignore[arg-type]
