"""Configuration validation and the error hierarchy."""

from __future__ import annotations

import dataclasses

import pytest

from gnsqlite import __version__
from gnsqlite.config import ConnectionConfig, ConsumerConfig
from gnsqlite.errors import (
    ERROR_CLASSES,
    BrokenConnectionError,
    ConfigError,
    ConnectionClosedError,
    InvalidNameError,
    NSQConnectionError,
    NSQError,
    NSQTimeoutError,
    ServerError,
    error_from_frame,
)

pytestmark = pytest.mark.no_server

ALL_CODES = [
    "E_INVALID",
    "E_BAD_BODY",
    "E_BAD_TOPIC",
    "E_BAD_CHANNEL",
    "E_BAD_MESSAGE",
    "E_PUB_FAILED",
    "E_MPUB_FAILED",
    "E_DPUB_FAILED",
    "E_FIN_FAILED",
    "E_REQ_FAILED",
    "E_TOUCH_FAILED",
    "E_AUTH_FAILED",
    "E_UNAUTHORIZED",
]


@pytest.mark.parametrize("code", ALL_CODES)
def test_every_code_has_a_class(code: str) -> None:
    err = error_from_frame(f"{code} something went wrong".encode())
    assert type(err) is ERROR_CLASSES[code]
    assert err.code == code
    assert err.text == "something went wrong"
    assert err.fatal == (code not in {"E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"})
    assert str(err) == f"{code} something went wrong"


def test_unknown_codes_keep_code_and_text() -> None:
    err = error_from_frame(b"E_SOMETHING_NEW the future")
    assert type(err) is ServerError
    assert (err.code, err.text, err.fatal) == ("E_SOMETHING_NEW", "the future", True)


def test_families_inherit_the_builtins() -> None:
    assert issubclass(ConfigError, ValueError)
    assert issubclass(InvalidNameError, ValueError)
    assert issubclass(NSQConnectionError, ConnectionError)
    assert issubclass(NSQTimeoutError, TimeoutError)
    for cls in (ConfigError, ServerError, NSQConnectionError, NSQTimeoutError):
        assert issubclass(cls, NSQError)
    err = BrokenConnectionError("127.0.0.1:4150", "connection reset")
    assert err.address == "127.0.0.1:4150"
    assert str(err) == "127.0.0.1:4150: connection reset"
    assert not isinstance(err, ConnectionClosedError)


def test_defaults_are_valid_and_immutable() -> None:
    cfg = ConnectionConfig()
    assert cfg.heartbeat_interval == 30.0
    assert cfg.user_agent == f"gnsqlite/{__version__}"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.snappy = True  # type: ignore[misc]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("heartbeat_interval", 0.5, r"heartbeat_interval=0\.5 is out of range: use 1\.0 s or more"),
        ("output_buffer_size", 10, "output_buffer_size=10 is out of range: use 64 bytes or more"),
        ("output_buffer_timeout", 0.0, "output_buffer_timeout=0.0 is out of range"),
        ("sample_rate", 100, "sample_rate=100 is out of range: use from 0 to 99"),
        ("sample_rate", -1, "sample_rate=-1 is out of range"),
        ("deflate_level", 0, "deflate_level=0 is out of range: use from 1 to 9"),
        ("deflate_level", 10, "deflate_level=10"),
        ("msg_timeout", 0.5, "msg_timeout=0.5"),
        ("snappy", "yes", "snappy='yes' must be bool, not str"),
        ("sample_rate", True, "must be int, not a bool"),
        ("heartbeat_interval", "30", "must be float"),
        ("deflate_level", None, "deflate_level=None is not allowed"),
    ],
)
def test_bad_values_name_option_value_and_range(option: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ConnectionConfig(**{option: value})  # type: ignore[arg-type]  # wrong types on purpose


def test_disabling_with_none_and_wire_units() -> None:
    cfg = ConnectionConfig(
        heartbeat_interval=None,
        output_buffer_size=None,
        output_buffer_timeout=None,
        msg_timeout=2.5,
        client_id="me",
    )
    body = cfg.identify_body("fallback-id", "host.example")
    assert body["heartbeat_interval"] == -1
    assert body["output_buffer_size"] == -1
    assert body["output_buffer_timeout"] == -1
    assert body["msg_timeout"] == 2500
    assert body["client_id"] == "me"
    assert body["hostname"] == "host.example"
    assert body["feature_negotiation"] is True
    default = ConnectionConfig().identify_body("id", "host")
    assert default["heartbeat_interval"] == 30000
    assert default["output_buffer_timeout"] == 250
    assert "msg_timeout" not in default


def test_snappy_and_deflate_never_together() -> None:
    with pytest.raises(ConfigError, match="cannot be used together"):
        ConnectionConfig(snappy=True, deflate=True)


def test_secrets_stay_out_of_repr() -> None:
    cfg = ConnectionConfig(auth_secret="hunter2")
    assert "hunter2" not in repr(cfg)
    assert cfg.auth_secret == "hunter2"


def test_from_mapping_parses_strings() -> None:
    cfg = ConnectionConfig.from_mapping(
        {"Snappy": "true", "heartbeat_interval": "5", "sample_rate": "10", "msg_timeout": "none"}
    )
    assert cfg.snappy is True
    assert cfg.heartbeat_interval == 5.0
    assert cfg.sample_rate == 10
    assert cfg.msg_timeout is None
    with pytest.raises(ConfigError, match=r"unknown option 'snapy'.*did you mean 'snappy'"):
        ConnectionConfig.from_mapping({"snapy": "true"})
    with pytest.raises(ConfigError, match="sample_rate='ten' is not int"):
        ConnectionConfig.from_mapping({"sample_rate": "ten"})
    with pytest.raises(ConfigError, match="deflate_level=12 is out of range"):
        ConnectionConfig.from_mapping({"deflate_level": "12"})
    assert ConnectionConfig.from_mapping({"zzz": "1"}, strict=False) == ConnectionConfig()


def test_consumer_config_rules() -> None:
    assert ConsumerConfig().max_in_flight == 1
    with pytest.raises(ConfigError, match="max_in_flight=-1"):
        ConsumerConfig(max_in_flight=-1)
    with pytest.raises(ConfigError, match=r"lookupd_poll_jitter=1\.5 is out of range"):
        ConsumerConfig(lookupd_poll_jitter=1.5)
    with pytest.raises(ConfigError, match=r"requeue_delay=100\.0 is above max_requeue_delay=10\.0"):
        ConsumerConfig(requeue_delay=100.0, max_requeue_delay=10.0)
    cfg = ConsumerConfig.from_mapping({"max_in_flight": "50", "requeue_delay": "1.5"})
    assert (cfg.max_in_flight, cfg.requeue_delay) == (50, 1.5)
    assert cfg.replace(max_in_flight=7).max_in_flight == 7
    with pytest.raises(ConfigError):
        cfg.replace(max_attempts=-3)


def test_low_rdy_timeout_is_float_seconds() -> None:
    assert ConsumerConfig().low_rdy_timeout == 30.0  # go-nsq's default
    assert ConsumerConfig.from_mapping({"low_rdy_timeout": "2.5"}).low_rdy_timeout == 2.5
    with pytest.raises(ConfigError, match=r"low_rdy_timeout=0 is out of range: use 0\.001 s"):
        ConsumerConfig(low_rdy_timeout=0)
    with pytest.raises(ConfigError, match="low_rdy_timeout='soon' must be float, not str"):
        ConsumerConfig(low_rdy_timeout="soon")  # type: ignore[arg-type]  # wrong type on purpose
