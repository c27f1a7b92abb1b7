"""examples/gunicorn_flask: real gunicorn, two gevent workers, against a live nsqd.

Besides publishing and consuming: ``/metrics`` (prometheus_client's
multiprocess mode) must sum what both workers published and consumed, and
``/healthz`` must answer 200 while connected and 503 while nsqd is gone.
"""

from __future__ import annotations

import collections
import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gnsqlite.testing import NsqdServer, free_port, wait_until

pytest.importorskip("gunicorn")
pytest.importorskip("flask")
pytest.importorskip("prometheus_client")

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "gunicorn_flask"
TOPIC, CHANNEL = "events", "web"


def channel(server: NsqdServer) -> dict[str, Any]:
    return server.channel_stats(TOPIC, CHANNEL)


def call(
    port: int, method: str, path: str, body: bytes = b"", json_body: bool | None = None
) -> tuple[int, dict[str, str], Any]:
    """One HTTP request: (status, headers, decoded JSON body)."""
    if json_body is None:
        json_body = body.startswith(b"{")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(
            method,
            path,
            body=body,
            headers={"Content-Type": "application/json"} if json_body else {},
        )
        response = conn.getresponse()
        data = response.read()
        try:
            decoded = json.loads(data)
        except ValueError:
            decoded = data
        return response.status, dict(response.getheaders()), decoded
    finally:
        conn.close()


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """``/metrics`` as {(sample name, labels): value}."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        text = response.read().decode()
        assert response.status == 200, text
    finally:
        conn.close()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def metric(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def request(port: int, method: str, path: str, body: bytes = b"") -> Any:
    status, _, data = call(port, method, path, body)
    assert status == 200, data
    return data


def answers(port: int) -> bool:
    try:
        request(port, "GET", "/stats")
    except OSError:
        return False
    return True


def gunicorn_argv() -> list[str]:
    return [
        sys.executable,
        "-m",
        "gunicorn",
        "-c",
        str(EXAMPLE / "gunicorn.conf.py"),
        "--chdir",
        str(EXAMPLE),
        "app:app",
    ]


@contextlib.contextmanager
def running_gunicorn(
    tmp_path: Path, nsqd_tcp_address: str, **settings: str
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """gunicorn serving the example on a free port, its output in ``tmp_path/gunicorn.out``."""
    port = free_port()
    env = dict(
        os.environ,
        BIND=f"127.0.0.1:{port}",
        NSQD_TCP_ADDRESS=nsqd_tcp_address,
        RECORD_DIR=str(tmp_path),
        PYTHONPATH=str(ROOT),
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "metrics"),
        **settings,
    )
    output = tmp_path / "gunicorn.out"
    log = open(output, "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(gunicorn_argv(), env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        # Both workers booted (a SIGTERM before a worker set its handlers is lost).
        wait_until(
            lambda: (
                output.read_text().count("NSQ clients started") == 2 or process.poll() is not None
            ),
            timeout=30,
            message="both workers started",
        )
        assert process.poll() is None, output.read_text()
        wait_until(lambda: answers(port), timeout=10, message="gunicorn answers /stats")
        yield process, port
    finally:
        if process.poll() is None:
            process.terminate()  # the master stops its workers before it exits
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()


@pytest.fixture
def gunicorn(nsqd: NsqdServer, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    with running_gunicorn(tmp_path, nsqd.tcp_address) as running:
        yield running


def test_two_workers_consume_each_message_once_and_stop_cleanly(
    nsqd: NsqdServer, gunicorn: tuple[subprocess.Popen[bytes], int], tmp_path: Path
) -> None:
    process, port = gunicorn
    output = tmp_path / "gunicorn.out"
    wait_until(
        lambda: len(channel(nsqd).get("clients", [])) == 2,
        timeout=20,
        message="both workers subscribed",
    )

    expected = [b"single %d" % i for i in range(100)]
    for body in expected:
        assert request(port, "POST", "/publish", body)["published"] == 1
    for batch in range(10):
        messages = [f"batch {batch}-{i}" for i in range(10)]
        expected += [m.encode() for m in messages]
        body = json.dumps({"messages": messages}).encode()
        assert request(port, "POST", "/publish", body)["published"] == 10

    def consumed() -> collections.Counter[bytes]:
        counts: collections.Counter[bytes] = collections.Counter()
        for path in tmp_path.glob("*.log"):
            counts.update(line for line in path.read_bytes().split(b"\n") if line)
        return counts

    wait_until(lambda: sum(consumed().values()) >= len(expected), timeout=30)
    wait_until(lambda: channel(nsqd)["in_flight_count"] == 0, timeout=10)
    assert consumed() == collections.Counter(expected)  # each one exactly once
    per_worker = [p.read_bytes().count(b"\n") for p in tmp_path.glob("*.log")]
    assert len(per_worker) == 2 and all(per_worker), per_worker  # both workers consumed
    stats = request(port, "GET", "/stats")
    assert stats["consumer"]["topic"] == TOPIC and stats["handled"] >= 0

    # /metrics, answered by either worker, sums both (counters reach the
    # shared directory within a second).
    def sums() -> tuple[float, ...]:
        samples = scrape(port)
        return (
            metric(samples, "gnsqlite_producer_publishes_total", topic=TOPIC, command="pub"),
            metric(samples, "gnsqlite_producer_publishes_total", topic=TOPIC, command="mpub"),
            metric(samples, "gnsqlite_producer_messages_total", topic=TOPIC),
            metric(samples, "gnsqlite_consumer_messages_received_total", topic=TOPIC),
            metric(samples, "gnsqlite_consumer_messages_finished_total", topic=TOPIC),
            metric(samples, "gnsqlite_consumer_handler_seconds_count", topic=TOPIC),
            metric(samples, "gnsqlite_connections", role="consumer", state="connected"),
            metric(samples, "gnsqlite_connections", role="producer", state="connected"),
        )

    expected_sums = (100, 10, 200, 200, 200, 200, 2, 2)
    wait_until(
        lambda: sums() == expected_sums, timeout=10, message=f"/metrics sums {expected_sums}"
    )
    samples = scrape(port)
    assert metric(samples, "gnsqlite_consumer_messages_requeued_total") == 0
    assert metric(samples, "gnsqlite_producer_publish_seconds_count", command="pub") == 100
    assert metric(samples, "gnsqlite_consumer_in_flight") == 0
    status, _, health = call(port, "GET", "/healthz")
    assert status == 200 and health["ok"], health
    assert health["consumer"]["connected"] == [nsqd.tcp_address], health

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0, output.read_text()
    final = channel(nsqd)
    assert final["in_flight_count"] == 0 and final["depth"] == 0, final
    assert final["clients"] == [], final
    assert consumed() == collections.Counter(expected)
    assert "Traceback" not in output.read_text()


LIMIT = 100  # nsqd's --max-msg-size in the bad-input test
BAD_INPUT = [
    # (what, path, body, is JSON, a word of the reason)
    ("empty body", "/publish", b"", False, "empty"),
    ("invalid topic", "/publish?topic=no/slash", b"x", False, "topic name"),
    ("empty topic", "/publish?topic=", b"x", False, "topic name"),
    ("above nsqd's --max-msg-size", "/publish", b"x" * (LIMIT + 1), False, "E_BAD_MESSAGE"),
    (
        "above the producer's max_message_size",
        "/publish",
        b"x" * (2 << 20),
        False,
        "max_message_size",
    ),
    (
        "one MPUB message above the limit",
        "/publish",
        json.dumps({"messages": ["fine", "x" * (LIMIT + 1)]}).encode(),
        True,
        "E_BAD_MESSAGE",
    ),
    ("one MPUB message empty", "/publish", b'{"messages": ["fine", ""]}', True, "empty"),
    ("messages not a list", "/publish", b'{"messages": "notalist"}', True, "list of strings"),
    ("messages not strings", "/publish", b'{"messages": ["a", 1]}', True, "list of strings"),
    ("no messages key", "/publish", b'{"message": ["a"]}', True, "list of strings"),
    ("JSON not an object", "/publish", b'["a", "b"]', True, "list of strings"),
    ("no messages", "/publish", b'{"messages": []}', True, "at least one"),
    ("invalid JSON", "/publish", b'{"messages": [', True, "invalid JSON"),
    ("empty JSON body", "/publish", b"", True, "invalid JSON"),
]


def test_bad_input_answers_400_with_the_reason_and_publishes_nothing(
    nsqd_factory: Any, tmp_path: Path
) -> None:
    nsqd = nsqd_factory(max_msg_size=LIMIT)
    with running_gunicorn(tmp_path, nsqd.tcp_address) as (_, port):
        answered = []
        for what, path, body, is_json, reason in BAD_INPUT:
            status, _, data = call(port, "POST", path, body, json_body=is_json)
            answered.append((what, status, data["published"], reason in data["error"]))
            assert data.keys() == {"published", "error"}, (what, data)
        assert answered == [(what, 400, 0, True) for what, *_ in BAD_INPUT]
        # Nothing of any of them reached nsqd, and the producer still works.
        assert nsqd.topic_stats(TOPIC).get("message_count", 0) == 0
        good = json.dumps({"messages": ["a", "b", "c"]}).encode()
        assert request(port, "POST", "/publish", good)["published"] == 3
        assert request(port, "POST", "/publish", b"x" * LIMIT)["published"] == 1
        assert nsqd.topic_stats(TOPIC)["message_count"] == 4
    assert "Traceback" not in (tmp_path / "gunicorn.out").read_text()


def test_no_reachable_nsqd_answers_503_with_retry_after(tmp_path: Path) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    with running_gunicorn(tmp_path, nowhere, NSQ_PUBLISH_TIMEOUT="0.5") as (_, port):
        for body in (b"one", b'{"messages": ["a", "b"]}'):
            status, headers, data = call(port, "POST", "/publish", body)
            assert (status, headers.get("Retry-After"), data["published"]) == (503, "1", 0)
            assert nowhere in data["error"], data
    assert "Traceback" not in (tmp_path / "gunicorn.out").read_text()


def test_nsqd_going_away_answers_503_until_it_is_back(nsqd: NsqdServer, tmp_path: Path) -> None:
    with running_gunicorn(tmp_path, nsqd.tcp_address, NSQ_PUBLISH_TIMEOUT="0.5") as (_, port):
        assert request(port, "POST", "/publish", b"before")["published"] == 1
        wait_until(
            lambda: all(call(port, "GET", "/healthz")[0] == 200 for _ in range(4)),
            timeout=10,
            message="/healthz 200 from both workers",
        )
        nsqd.stop()
        status, headers, data = call(port, "POST", "/publish", b'{"messages": ["a", "b"]}')
        assert (status, headers.get("Retry-After"), data["published"]) == (503, "1", 0), data
        wait_until(
            lambda: all(call(port, "GET", "/healthz")[0] == 503 for _ in range(4)),
            timeout=10,
            message="/healthz 503 from both workers",
        )
        status, _, health = call(port, "GET", "/healthz")
        assert status == 503 and not health["ok"], health
        assert health["consumer"]["reasons"][0].startswith("no nsqd connected"), health
        nsqd.start()
        wait_until(
            lambda: call(port, "POST", "/publish", b"after")[0] == 200,
            timeout=20,
            message="publishing works again once nsqd is back",
        )
        wait_until(
            lambda: call(port, "GET", "/healthz")[0] == 200,
            timeout=20,
            message="/healthz 200 again",
        )
    assert "Traceback" not in (tmp_path / "gunicorn.out").read_text()


def thread_states(pid: int) -> str:
    """One letter per thread of ``pid`` (``/proc/<pid>/task/*/stat``): R, S, T ..."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            states.append(task.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0])
    return "".join(states)


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[None]:
    """``pid`` stopped (SIGSTOP) until the block ends, then continued.

    Waits until every thread is stopped: the kernel stops a multithreaded
    process only once the thread it woke for SIGSTOP runs, and until then the
    others keep serving (on a loaded machine nsqd answered a PUB sent after
    ``kill`` returned, while its threads still showed R and S).
    """
    if not Path(f"/proc/{pid}/task").is_dir():
        pytest.skip("needs Linux /proc to see that nsqd's threads are stopped")
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(
            lambda: set(thread_states(pid)) <= {"T", "t"},
            timeout=10,
            interval=0.005,
            message=f"every thread of {pid} stopped",
        )
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_publish_nsqd_does_not_confirm_answers_503_published_unknown(
    nsqd: NsqdServer, tmp_path: Path
) -> None:
    with running_gunicorn(tmp_path, nsqd.tcp_address, NSQ_PUBLISH_TIMEOUT="0.5") as (_, port):
        assert request(port, "POST", "/publish", b"warm up")["published"] == 1
        assert request(port, "POST", "/publish", b"warm up")["published"] == 1  # both workers
        pid = nsqd.process.pid if nsqd.process is not None else None
        assert pid is not None
        with stopped(pid):  # connected, but it answers nothing
            status, headers, data = call(port, "POST", "/publish", b"maybe")
        assert (status, headers.get("Retry-After"), data["published"]) == (503, "1", None), data
        assert "no answer" in data["error"]


@pytest.mark.parametrize(
    ("setting", "value", "reason"),
    [
        ("NSQD_TCP_ADDRESS", "nohost", "'host:port'"),
        ("NSQ_TOPIC", "bad/topic", "topic name"),
        ("NSQ_CHANNEL", "", "channel name"),
        ("NSQ_MAX_IN_FLIGHT", "many", "NSQ_MAX_IN_FLIGHT='many' is not a number"),
        ("NSQ_MAX_IN_FLIGHT", "-1", "max_in_flight=-1"),
        ("NSQ_PUBLISH_TIMEOUT", "0", "timeout=0.0"),
    ],
)
def test_a_bad_setting_stops_gunicorn_with_one_line(setting: str, value: str, reason: str) -> None:
    env = dict(
        os.environ,
        BIND=f"127.0.0.1:{free_port()}",
        PYTHONPATH=str(ROOT),
        NSQD_TCP_ADDRESS="127.0.0.1:4150",
    )
    env[setting] = value
    result = subprocess.run(gunicorn_argv(), env=env, capture_output=True, text=True, timeout=60)
    errors = [line for line in result.stderr.splitlines() if "[INFO]" not in line]
    assert result.returncode == 1, result.stderr
    assert len(errors) == 1 and errors[0].startswith("gunicorn_flask: bad NSQ setting"), errors
    assert reason in errors[0], errors
