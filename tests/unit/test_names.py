"""Topic and channel names: 1 to 64 of [.a-zA-Z0-9_-], with an optional #ephemeral."""

from __future__ import annotations

import pytest

from gnsqlite.errors import InvalidNameError
from gnsqlite.protocol import (
    check_channel_name,
    check_topic_name,
    is_ephemeral,
    valid_channel_name,
    valid_topic_name,
)

pytestmark = pytest.mark.no_server

VALID = ["a", "clicks", "a.b-c_d", "A9", "x" * 64, "x" * 54 + "#ephemeral", "t#ephemeral", "..."]
INVALID = [
    "",
    "x" * 65,
    "x" * 55 + "#ephemeral",
    "a b",
    "a/b",
    "é",
    "#ephemeral",
    "a#eph",
    "a#",
    "abc\n",
    "abc#ephemeral\n",
    "a\nb",
]


@pytest.mark.parametrize("name", VALID)
def test_valid_names(name: str) -> None:
    assert valid_topic_name(name)
    assert valid_channel_name(name)
    assert check_topic_name(name) == name
    assert check_topic_name(name.encode()) == name


@pytest.mark.parametrize("name", INVALID)
def test_invalid_names(name: str) -> None:
    assert not valid_topic_name(name)
    assert not valid_channel_name(name)
    with pytest.raises(InvalidNameError):
        check_topic_name(name)
    with pytest.raises(ValueError):  # InvalidNameError is a ValueError
        check_channel_name(name)


def test_messages_name_the_rule_broken() -> None:
    with pytest.raises(InvalidNameError, match="is empty"):
        check_topic_name("")
    with pytest.raises(InvalidNameError, match="65 characters long; the limit is 64"):
        check_topic_name("x" * 65)
    with pytest.raises(InvalidNameError, match=r"contains ' ', '!'; only characters from"):
        check_topic_name("bad topic!")
    with pytest.raises(InvalidNameError, match="nothing before the '#ephemeral' suffix"):
        check_channel_name("#ephemeral")
    with pytest.raises(InvalidNameError, match="must be a str, not int"):
        check_topic_name(5)  # type: ignore[arg-type]


def test_ephemeral() -> None:
    assert is_ephemeral("t#ephemeral")
    assert not is_ephemeral("t")
