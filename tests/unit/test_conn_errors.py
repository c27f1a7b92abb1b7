"""Network errors are translated once, at the connection's I/O edge."""

from __future__ import annotations

import ssl

import pytest

from gnsqlite.errors import BrokenConnectionError, NSQTimeoutError, map_io_errors

pytestmark = pytest.mark.no_server


@pytest.mark.parametrize("cause", [ConnectionResetError("reset"), ssl.SSLError("bad record")])
def test_an_os_error_becomes_a_broken_connection_naming_the_address(cause: OSError) -> None:
    with (
        pytest.raises(BrokenConnectionError, match="read failed") as info,
        map_io_errors("127.0.0.1:4150", "read failed"),
    ):
        raise cause
    assert "127.0.0.1:4150" in str(info.value)
    assert info.value.__cause__ is cause


def test_the_librarys_own_errors_and_unlisted_kinds_pass_unchanged() -> None:
    own = NSQTimeoutError("slow")  # a TimeoutError, so an OSError too
    with pytest.raises(NSQTimeoutError) as info, map_io_errors("h:1", "read failed"):
        raise own
    assert info.value is own
    with pytest.raises(ValueError, match="odd"), map_io_errors("h:1", "read failed"):
        raise ValueError("odd")
    with (
        pytest.raises(BrokenConnectionError, match="connect failed: odd"),
        map_io_errors("h:1", "connect failed", OSError, ValueError),
    ):
        raise ValueError("odd")
