"""``gnsqlite pub`` reading a pipe fed slowly (``tail -f app.log | gnsqlite pub``), and Ctrl-C."""

from __future__ import annotations

import subprocess
import threading
from functools import partial
from typing import Any

from cli_helpers import gnsqlite, interrupt, killed_at_exit, start, unread_bytes

from gnsqlite.testing import wait_until


def _count(nsqd: Any, topic: str) -> int:
    for t in nsqd.stats(topic=topic).get("topics") or []:
        if t["topic_name"] == topic:
            return int(t["message_count"])
    return 0


def _count_is(nsqd: Any, topic: str, count: int) -> bool:
    return _count(nsqd, topic) == count


def _pub(nsqd: Any, topic: str, *extra: str) -> subprocess.Popen[bytes]:
    args = ["pub", "--topic", topic, "--nsqd-tcp-address", nsqd.tcp_address, *extra]
    return start(args, stdin=subprocess.PIPE)


def _write(proc: subprocess.Popen[bytes], data: bytes) -> None:
    assert proc.stdin is not None
    proc.stdin.write(data)
    proc.stdin.flush()


def test_pub_publishes_a_slow_pipe_line_by_line_as_lines_arrive(nsqd: Any) -> None:
    # Each line is published while the writer is still writing: the pipe stays
    # open and holds 6 bytes, far from a batch of 100 or a 64 KiB read.
    with killed_at_exit(_pub(nsqd, "slow", "--batch", "100", "--flush-interval", "0.05")) as proc:
        for n in range(1, 6):
            _write(proc, b"line%d\n" % n)
            wait_until(
                partial(_count_is, nsqd, "slow", n),
                timeout=5,
                message=f"line {n} published before the next was written",
            )
        out, err = proc.communicate(timeout=15)  # closes the pipe: the input ends
    assert proc.returncode == 0, err
    assert b"published 5 messages to 'slow' in 5 MPUB batches" in out, out
    assert _count(nsqd, "slow") == 5


def test_a_steady_stream_is_held_no_longer_than_the_flush_interval(nsqd: Any) -> None:
    # 20 lines a second never pause for the 1 s interval: a batch still goes 1 s
    # after its first line, not when 100 lines (5 s) filled it.
    with killed_at_exit(_pub(nsqd, "steady", "--batch", "100", "--flush-interval", "1")) as proc:
        done = threading.Event()

        def write() -> None:
            n = 0
            while not done.is_set():
                _write(proc, b"line%d\n" % n)
                n += 1
                done.wait(0.05)  # the writer's pace

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        try:
            wait_until(
                lambda: _count(nsqd, "steady") >= 10,
                timeout=4,
                message="a batch sent while the stream went on",
            )
        finally:
            done.set()
            writer.join(5)
        proc.communicate(timeout=15)
    assert proc.returncode == 0


def test_ctrl_c_on_an_open_pipe_stops_at_once_and_publishes_what_was_read(nsqd: Any) -> None:
    # A batch that would wait a minute for more input holds 3 records when
    # Ctrl-C comes; the writer never closes the pipe.
    with killed_at_exit(_pub(nsqd, "cut", "--batch", "100", "--flush-interval", "60")) as proc:
        _write(proc, b"one\ntwo\nthree\n")
        stdin = proc.stdin
        assert stdin is not None
        wait_until(lambda: unread_bytes(stdin) == 0, timeout=10, message="pub read the three lines")
        assert _count(nsqd, "cut") == 0  # held, waiting for a full batch or a pause
        result = interrupt(proc, timeout=5.0)
    assert result.returncode == 130, result
    assert "published 3 messages to 'cut' in 1 MPUB batches" in result.stdout, result
    assert "(interrupted)" in result.stdout
    assert "Traceback" not in result.stderr and "not published" not in result.stderr
    assert _count(nsqd, "cut") == 3


def test_ctrl_c_counts_an_unfinished_record_as_not_published(nsqd: Any) -> None:
    with killed_at_exit(_pub(nsqd, "part", "--flush-interval", "0.05")) as proc:
        _write(proc, b"whole\nhalf a li")
        wait_until(lambda: _count(nsqd, "part") == 1, timeout=10, message="the whole line")
        result = interrupt(proc, timeout=5.0)
    assert result.returncode == 130, result
    assert "published 1 messages" in result.stdout, result
    assert result.stderr.strip() == (
        "gnsqlite pub: not published: 1 unfinished record (9 bytes read with no"
        " delimiter after them when Ctrl-C came)"
    ), result.stderr
    assert _count(nsqd, "part") == 1


def test_a_record_nsqd_would_refuse_is_counted_and_the_rest_still_published(nsqd: Any) -> None:
    too_big = b"x" * (1024 * 1024 + 1)  # nsqd's --max-msg-size is 1 MiB by default
    result = gnsqlite(
        ["pub", "--topic", "sized", "--nsqd-tcp-address", nsqd.tcp_address, "--batch", "1"],
        input=b"a\n" + too_big + b"\nc\n",
    )
    assert result.returncode == 1, result  # something read was not published
    assert "published 2 messages to 'sized'" in result.stdout, result
    assert result.stderr.startswith(
        "gnsqlite pub: error: not published: 1 record read (a message of 1048577 bytes exceeds"
    ), result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert _count(nsqd, "sized") == 2
