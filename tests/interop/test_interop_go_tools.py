"""go-nsq's own command-line tools against the embedded broker.

``to_nsq`` (a go-nsq Producer fed from stdin) publishes and ``nsq_tail`` (a
go-nsq Consumer) reads back, plain, with snappy, with deflate and over TLS:
a third client nobody here wrote, and the reference one. The tools are the
unmodified NSQ v1.3.0 builds; they are looked for in ``$GNSQLITE_NSQD`` or,
in a checkout with ``shared/`` beside it, ``../shared/nsq/bin``. Without
them these tests skip: the project never needs them.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from gnsqlite.testing import NsqdServer, TLSFiles, wait_until

pytestmark = [pytest.mark.interop, pytest.mark.embedded_only]

_REPO = Path(__file__).resolve().parents[2]
_TIMEOUT = 30.0  # seconds for one tool run


def go_tool(name: str) -> str:
    """The path of one of NSQ's Go tools, or skip the test."""
    for folder in (os.environ.get("GNSQLITE_NSQD"), _REPO.parent / "shared" / "nsq" / "bin"):
        if folder and os.access(Path(folder) / name, os.X_OK):
            return str(Path(folder) / name)
    pytest.skip(f"{name} not found (set GNSQLITE_NSQD to a folder of NSQ's binaries)")


def run(argv: list[str], stdin: bytes = b"") -> str:
    done = subprocess.run(argv, input=stdin, capture_output=True, timeout=_TIMEOUT, check=False)
    assert done.returncode == 0, f"{argv[0]} exited {done.returncode}: {done.stderr.decode()}"
    return done.stdout.decode()


def opts(flag: str, options: list[str]) -> list[str]:
    return [f"-{flag}={option}" for option in options]


def round_trip(nsqd: NsqdServer, topic: str, options: list[str], count: int = 200) -> None:
    """to_nsq publishes ``count`` lines, nsq_tail prints them back, in order."""
    lines = [f"line {i} " + "payload " * (i % 40) for i in range(count)]
    address, target = f"-nsqd-tcp-address={nsqd.tcp_address}", f"-topic={topic}"
    run(
        [go_tool("to_nsq"), address, target, *opts("producer-opt", options)],
        stdin="".join(line + "\n" for line in lines).encode(),
    )
    assert nsqd.topic_stats(topic)["message_count"] == count
    tail = [go_tool("nsq_tail"), address, target, f"-n={count}", "-max-in-flight=50"]
    out = run([*tail, *opts("consumer-opt", options)])
    assert out.splitlines() == lines


Factory = Callable[..., NsqdServer]


@pytest.mark.parametrize(
    "options",
    [[], ["snappy,true"], ["deflate,true", "deflate_level,6"]],
    ids=["plain", "snappy", "deflate"],
)
def test_to_nsq_and_nsq_tail(nsqd_factory: Factory, options: list[str]) -> None:
    nsqd = nsqd_factory(bin_dir="")
    round_trip(nsqd, "go_tools", options)
    # nsq_tail's channel is ephemeral: it goes when its last client has left
    wait_until(lambda: nsqd.topic_stats("go_tools")["channels"] == [], timeout=5)


@pytest.mark.parametrize("compression", [[], ["snappy,true"], ["deflate,true"]])
def test_to_nsq_and_nsq_tail_over_tls(
    nsqd_factory: Factory, tls_files: TLSFiles, compression: list[str]
) -> None:
    # TLS on TCP only: the test reads stats over plain HTTP, which nsqd refuses with true
    nsqd = nsqd_factory(
        bin_dir="",
        tls_cert=tls_files.cert_file,
        tls_key=tls_files.key_file,
        tls_required="tcp-https",
    )
    tls = ["tls_v1,true", f"tls_root_ca_file,{tls_files.ca_file}"]
    round_trip(nsqd, "go_tools_tls", tls + compression, count=50)
