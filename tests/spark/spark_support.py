"""Helpers of the Spark connector tests: publish, consume back, read nsqd's stats."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gnsqlite.consumer import Consumer
from gnsqlite.http import NsqdHTTPClient
from gnsqlite.message import Message
from gnsqlite.testing import NsqdServer, wait_until

if TYPE_CHECKING:
    from gnsqlite.spark.shell import SourceShell


def publish(server: NsqdServer, bodies: list[bytes], topic: str) -> None:
    """MPUB ``bodies`` to ``topic`` over nsqd's HTTP API, 1,000 at a time.

    Returns once nsqd has passed them to the topic's channels, if it has
    any: nsqd answers a publish when the topic holds the message and copies
    it to each channel afterwards (the real nsqd in another goroutine), so a
    channel's depth read at once can be short of what was published.
    """
    client = NsqdHTTPClient(server.http_address, timeout=10.0)
    for start in range(0, len(bodies), 1000):
        client.mpub(topic, bodies[start : start + 1000])
    wait_until(
        lambda: not (stats := server.topic_stats(topic)).get("channels") or stats["depth"] == 0,
        timeout=10,
        message=f"nsqd passed what was published to {topic!r} to its channels",
    )


def consume(server: NsqdServer, topic: str, count: int, timeout: float = 60.0) -> list[bytes]:
    """Consume ``count`` messages of ``topic`` on a fresh channel; returns their bodies."""
    got: list[bytes] = []

    def handle(message: Message) -> None:
        got.append(message.body)

    consumer = Consumer(
        topic, "check", handle, nsqd_tcp_addresses=[server.tcp_address], max_in_flight=2500
    )
    consumer.start()
    try:
        wait_until(
            lambda: len(got) >= count,
            timeout=timeout,
            message=f"{count} messages consumed from {topic} (got {len(got)})",
        )
    finally:
        consumer.close(5.0)
    return got


def offset_past(reader: SourceShell, start: dict[str, Any]) -> dict[str, Any]:
    """For wait_until: the reader's latest offset once past ``start``; ``{}`` (falsy) before."""
    end = reader.latestOffset(start)
    return end if end != start else {}


def latest_report(reader: SourceShell) -> dict[str, Any]:
    """``reader.reportLatestOffset()`` of a started reader (``None`` only when not running)."""
    report = reader.reportLatestOffset()
    assert report is not None, "the source is not running"
    return report


def read_rows(reader: Any, parts: Any) -> list[tuple[Any, ...]]:
    """The rows ``reader.read`` yields for ``parts``, as the source's columns in order."""
    return [
        tuple(row.values())
        for part in parts
        for batch in reader.read(part)
        for row in batch.to_pylist()
    ]


def channel_stats(server: NsqdServer, topic: str, channel: str) -> dict[str, Any]:
    """nsqd's stats of one channel, or ``{}`` if it does not exist."""
    return server.channel_stats(topic, channel)


def drained(server: NsqdServer, topic: str, channel: str) -> bool:
    """True when the channel exists and holds nothing: no depth, in flight or deferred."""
    return server.channel_drained(topic, channel)


def topic_count(server: NsqdServer, topic: str) -> int:
    """How many messages ``topic`` received, by nsqd's stats (0 if it does not exist)."""
    return int(server.topic_stats(topic).get("message_count", 0))


def nsqd_clients(tcp_port: int) -> dict[int, int]:
    """``{pid: parent pid}`` of every process with a TCP connection to ``tcp_port``, but this one.

    Read from the process table: the sockets of ``/proc/net/tcp{,6}`` whose
    remote port is ``tcp_port``, matched to their owners through
    ``/proc/<pid>/fd``. Processes that end while being read are skipped.
    """
    import os

    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            remote, state, inode = fields[2], fields[3], fields[9]
            if state == "01" and int(remote.rsplit(":", 1)[1], 16) == tcp_port:  # ESTABLISHED
                inodes.add(f"socket:[{inode}]")
    found: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
            if not any(os.readlink(f"/proc/{name}/fd/{fd}") in inodes for fd in fds):
                continue
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        found[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return found


def process_name(pid: int) -> str:
    """The command line of ``pid`` (spaces between arguments), or "" if it ended."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""
