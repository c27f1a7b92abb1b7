"""The one option mechanism (``gnsqlite.options``) and the option sets declared with it.

The client's configs, the broker's options, the batch's, Spark's and the
drop-in's are each declared once with :func:`gnsqlite.options.option`; the
front ends (the broker's flags, Spark's keys, pynsq's keywords) are built
from those declarations.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from gnsqlite.broker import BrokerOptions
from gnsqlite.broker.__main__ import build_parser, options_from_args
from gnsqlite.config import ConnectionConfig, ConsumerConfig, ProducerConfig
from gnsqlite.consumer.batch import BatchConfig
from gnsqlite.errors import ConfigError
from gnsqlite.nsq.options import CONNECTION_KEYWORDS, connection_config
from gnsqlite.options import Validated, option, options_of
from gnsqlite.spark.options import OPTIONS, FormatOptions

pytestmark = pytest.mark.no_server


@dataclass(frozen=True, kw_only=True)
class _Sample(Validated):
    interval: float = option(
        1.0,
        float,
        above=0,
        hi=10,
        unit="s",
        flag="interval",
        key="sampleInterval",
        keyword="interval_s",
        doc="how often",
    )
    mode: str = option("a", str, parse=lambda text: text.strip().upper())
    level: int = option(3, int, lo=1, hi=9)


def test_a_declaration_carries_every_spelling_and_its_range() -> None:
    interval, mode, level = options_of(_Sample)
    assert (interval.name, interval.flag, interval.key, interval.keyword, interval.doc) == (
        "interval",
        "interval",
        "sampleInterval",
        "interval_s",
        "how often",
    )
    assert interval.describe_range() == "above 0 s and at most 10 s"
    assert level.describe_range() == "from 1 to 9"
    assert mode.flag is None and mode.kinds == (str,)


def test_the_exclusive_bound_and_the_text_parser() -> None:
    with pytest.raises(ConfigError, match=r"interval=0 is out of range: use above 0 s"):
        _Sample(interval=0)
    assert _Sample(interval=0.001).interval == 0.001
    assert _Sample.from_mapping({"MODE": " b ", "level": "4"}) == _Sample(mode="B", level=4)
    with pytest.raises(ConfigError, match=r"level='x' is not int: use from 1 to 9"):
        _Sample.from_mapping({"level": "x"})
    with pytest.raises(ConfigError, match=r"unknown option 'levl' for _Sample; did you mean"):
        _Sample.from_mapping({"levl": "4"})


@pytest.mark.parametrize(
    "cls",
    [ConnectionConfig, ConsumerConfig, ProducerConfig, BatchConfig, BrokerOptions, FormatOptions],
)
def test_every_option_set_is_declared_with_the_mechanism_and_its_defaults_are_valid(
    cls: type[Validated],
) -> None:
    assert issubclass(cls, Validated)
    declared = options_of(cls)
    assert declared and cls().option_names()[: len(declared)] == tuple(o.name for o in declared)


def test_the_brokers_flags_are_its_declarations() -> None:
    flagged = [o for o in options_of(BrokerOptions) if o.flag]
    assert len(flagged) == 31  # nsqd's flags the broker takes, plus --max-connections
    helps = {a.option_strings[0][2:]: a.help for a in build_parser()._actions if a.help}
    for o in flagged:
        assert o.doc in helps[o.flag or ""] and "(default" in helps[o.flag or ""]
    assert options_from_args(["--max-deflate-level=3", "--tls-required=tcp-https"]) == {
        "max_deflate_level": 3,
        "tls_required": "tcp-https",
    }


def test_the_brokers_values_are_checked_by_the_mechanism() -> None:
    with pytest.raises(ConfigError, match=r"msg_timeout=0 is out of range: use above 0 s"):
        BrokerOptions(msg_timeout=0)
    with pytest.raises(ConfigError, match=r"max_deflate_level=10 is out of range: use from 1 to 9"):
        BrokerOptions(max_deflate_level=10)
    with pytest.raises(ConfigError, match=r"max_rdy_count=True must be int, not a bool"):
        BrokerOptions(max_rdy_count=True)
    with pytest.raises(ConfigError, match=r"max_msg_size=10 is above max_body_size=5"):
        BrokerOptions(max_msg_size=10, max_body_size=5)


def test_spark_keys_and_pynsq_keywords_come_from_declarations() -> None:
    assert options_of(FormatOptions) == OPTIONS
    keys = [o.key for o in OPTIONS]
    assert all(keys) and len(set(keys)) == len(keys) and "maxMessagesPerBatch" in keys
    keywords = {o.keyword: o.name for o in options_of(ConnectionConfig) if o.keyword}
    assert keywords["timeout"] == "connect_timeout" and keywords["tls_options"] == "tls_context"
    assert set(CONNECTION_KEYWORDS) == {*keywords, "requeue_delay"}
    config = connection_config({"timeout": 2, "output_buffer_timeout": 100, "snappy": True})
    assert (config.connect_timeout, config.output_buffer_timeout, config.snappy) == (2, 0.1, True)


def test_the_mechanism_is_pure() -> None:
    """It sits in the pure core, where the broker may import it: no I/O, nothing of the client."""
    import gnsqlite.options

    tree = ast.parse(Path(gnsqlite.options.__file__).read_text())
    absolute = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 0
    }
    relative = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level
    }
    assert not absolute & {"gevent", "socket", "ssl", "time", "logging", "gnsqlite"}
    assert relative == {"errors"}
