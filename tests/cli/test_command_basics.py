"""``gnsqlite`` itself: help with examples for every subcommand, unknown commands, version."""

from __future__ import annotations

import pytest
from cli_helpers import assert_one_line_error, gnsqlite

from gnsqlite.cli import COMMANDS


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_subcommand_has_help_with_examples(command: str) -> None:
    result = gnsqlite([command, "--help"])
    assert result.returncode == 0, result
    assert f"gnsqlite {command}" in result.stdout
    assert "examples:" in result.stdout


def test_top_level_help_lists_every_command() -> None:
    result = gnsqlite(["--help"])
    assert result.returncode == 0
    for command in COMMANDS:
        assert f"  {command}" in result.stdout


def test_an_unknown_command_is_one_line() -> None:
    assert_one_line_error(gnsqlite(["frobnicate"]), 2, "unknown command 'frobnicate'")


def test_a_missing_required_flag_is_one_line() -> None:
    assert_one_line_error(gnsqlite(["tail"]), 2, "--topic", "--help")
