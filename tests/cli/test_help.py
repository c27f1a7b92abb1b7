"""``--help``: every flag of every subcommand has a line of help and says its default.

Before, ``gnsqlite broker --help`` printed two usage blocks, its nsqd flags had
no help and each was listed twice; ``demo --rate``, ``bench --messages``,
``stats --timeout``, ``dashboard --interval`` ... showed no default; ``pub``
showed ``--topic`` as optional.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from cli_helpers import gnsqlite

from gnsqlite.cli import COMMANDS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions
        if a.option_strings
        and a.help != argparse.SUPPRESS
        and not isinstance(a, argparse._HelpAction)
    ]


def _undocumented(parser: argparse.ArgumentParser) -> list[str]:
    """The flags of ``parser`` with no help, or whose help says neither default nor required."""
    formatter = parser._get_formatter()
    missing = []
    for action in _flags(parser):
        text = formatter._expand_help(action) if action.help else ""
        switch = action.nargs == 0  # --verbose, --json: off unless given
        if not text.strip() or not (switch or "default" in text or "required" in text):
            missing.append(f"{'/'.join(action.option_strings)}: {text!r}")
    return missing


@pytest.mark.no_server
@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_flag_has_help_and_its_default(name: str) -> None:
    parser = importlib.import_module(f"gnsqlite.cli.{name}").build_parser()
    missing = _undocumented(parser)
    assert not missing, "\n".join(missing)


def _example(path: Path) -> ModuleType:
    sys.path.insert(0, str(path.parent))  # the crawler imports its sibling module
    try:
        spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(path.parent))


@pytest.mark.no_server
@pytest.mark.parametrize(
    "path", ["batch_consumer.py", "dead_letters.py", "dashboard_consumer.py", "crawler/pipeline.py"]
)
def test_every_example_option_has_help_and_its_default(path: str) -> None:
    missing = _undocumented(_example(EXAMPLES / path).build_parser())
    assert not missing, "\n".join(missing)


@pytest.mark.no_server
def test_the_gunicorn_example_s_help_lists_every_setting() -> None:
    pytest.importorskip("flask")
    app = _example(EXAMPLES / "gunicorn_flask" / "app.py")
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "gunicorn_flask" / "app.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    for name in app.SETTINGS:
        assert f"\n  {name} " in done.stdout, (name, done.stdout)
    assert "gunicorn -c examples/gunicorn_flask/gunicorn.conf.py" in done.stdout


@pytest.mark.no_server
def test_broker_help_is_one_usage_with_each_nsqd_flag_once() -> None:
    result = gnsqlite(["broker", "--help"])
    assert result.returncode == 0, result
    out = result.stdout
    assert out.count("usage:") == 1, out
    for flag in ("--tcp-address", "--msg-timeout", "--max-rdy-count", "--tls-required"):
        lines = [line for line in out.splitlines() if line.strip().startswith(flag + " ")]
        assert len(lines) == 1, (flag, out)
    assert not [line for line in out.splitlines() if line.lstrip().startswith("-tcp-address")]
    assert "(default 1m)" in out and "(default 127.0.0.1:4150)" in out


@pytest.mark.no_server
def test_pub_help_shows_what_is_required() -> None:
    out = gnsqlite(["pub", "--help"]).stdout
    usage = out.split("\n\n")[0]
    assert "--topic TOPIC --nsqd-tcp-address ADDR" in usage, usage
    assert "[--topic" not in usage, usage
