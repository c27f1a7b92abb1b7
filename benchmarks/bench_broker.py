"""Throughput of the embedded broker: publishing (MPUB) and delivery to one consumer.

The broker runs in a subprocess (``python -m gnsqlite.broker``) so it has a
core of its own; this process is a minimal raw-socket producer and consumer
built on :mod:`gnsqlite.protocol` (blocking stdlib sockets, no gevent).

1. publish: one producer MPUBs ``--messages`` bodies of ``--size`` bytes in
   batches of ``--batch`` into a topic whose channel already exists;
2. deliver: one consumer with ``RDY --rdy`` receives them all, FINs batched
   per received chunk.

Prints messages per second for both. Not a test; not run in CI::

    python benchmarks/bench_broker.py [--messages 200000] [--profile out.prof]

``--profile FILE`` runs the broker under cProfile and writes its stats to FILE.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from gnsqlite.net import parse_address, set_nodelay
from gnsqlite.protocol import FRAME_TYPE_MESSAGE, FRAME_TYPE_RESPONSE, FrameDecoder, mpub

TOPIC = "bench"
CHANNEL = "ch"


def start_broker(profile: str | None, rdy: int) -> tuple[subprocess.Popen[str], str, str]:
    args = [
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        f"--max-rdy-count={max(rdy, 2500)}",
        "--log-level=warn",
    ]
    if profile:
        run = 'runpy.run_module("gnsqlite.broker", run_name="__main__")'
        code = (
            "import cProfile, sys, runpy; sys.argv = ['gnsqlite.broker'] + sys.argv[1:];"
            f"cProfile.run({run!r}, {profile!r})"
        )
        cmd = [sys.executable, "-c", code, *args]
    else:
        cmd = [sys.executable, "-m", "gnsqlite.broker", *args]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    while True:
        line = proc.stderr.readline()
        if not line:
            raise SystemExit("the broker did not start")
        match = re.search(r"TCP: listening on (\S+); HTTP: listening on (\S+)", line)
        if match:
            return proc, match.group(1), match.group(2)


def connect(address: str) -> socket.socket:
    sock = socket.create_connection(parse_address(address))
    set_nodelay(sock)
    sock.sendall(b"  V2")
    return sock


def read_response(sock: socket.socket, decoder: FrameDecoder) -> bytes:
    while True:
        frame = decoder.next_frame()
        if frame is not None:
            kind, data = frame
            if kind != FRAME_TYPE_RESPONSE:
                raise SystemExit(f"unexpected frame {kind} {data[:100]!r}")
            if data != b"_heartbeat_":
                return data
            sock.sendall(b"NOP\n")
            continue
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise SystemExit("broker closed the connection")
        decoder.feed(chunk)


def publish(address: str, n: int, size: int, batch: int) -> float:
    sock = connect(address)
    decoder = FrameDecoder()
    body = b"x" * size
    command = mpub(TOPIC, [body] * batch)
    started = time.perf_counter()
    sent = 0
    while sent < n:
        count = min(batch, n - sent)
        sock.sendall(command if count == batch else mpub(TOPIC, [body] * count))
        if read_response(sock, decoder) != b"OK":
            raise SystemExit("MPUB failed")
        sent += count
    elapsed = time.perf_counter() - started
    sock.close()
    return elapsed


def consume(address: str, n: int, rdy: int) -> float:
    sock = connect(address)
    decoder = FrameDecoder()
    sock.sendall(b"SUB %s %s\n" % (TOPIC.encode(), CHANNEL.encode()))
    if read_response(sock, decoder) != b"OK":
        raise SystemExit("SUB failed")
    started = time.perf_counter()
    sock.sendall(b"RDY %d\n" % rdy)
    received = 0
    while received < n:
        chunk = sock.recv(1 << 18)
        if not chunk:
            raise SystemExit("broker closed the connection")
        decoder.feed(chunk)
        fins = []
        for kind, data in decoder.frames():
            if kind == FRAME_TYPE_MESSAGE:
                fins.append(b"FIN " + data[10:26] + b"\n")
            elif data == b"_heartbeat_":
                fins.append(b"NOP\n")
        if fins:
            received += len(fins)
            sock.sendall(b"".join(fins))
    elapsed = time.perf_counter() - started
    sock.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rdy", type=int, default=2500)
    parser.add_argument("--profile", metavar="FILE", default=None)
    args = parser.parse_args()

    proc, tcp, http = start_broker(args.profile, args.rdy)
    try:
        req = urllib.request.Request(f"http://{http}/topic/create?topic={TOPIC}", data=b"")
        urllib.request.urlopen(req, timeout=5).close()
        req = urllib.request.Request(
            f"http://{http}/channel/create?topic={TOPIC}&channel={CHANNEL}", data=b""
        )
        urllib.request.urlopen(req, timeout=5).close()

        pub_s = publish(tcp, args.messages, args.size, args.batch)
        deliver_s = consume(tcp, args.messages, args.rdy)
        with urllib.request.urlopen(f"http://{http}/stats?format=json", timeout=5) as r:
            stats = json.loads(r.read())
        channel = stats["topics"][0]["channels"][0]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    n = args.messages
    print(
        f"broker: embedded gnsqlite (pid was {proc.pid}), python {sys.version.split()[0]},"
        f" {os.cpu_count()} cpus"
    )
    print(
        f"publish: {n} x {args.size} B in MPUB batches of {args.batch}:"
        f" {pub_s:.2f} s = {n / pub_s:,.0f} msg/s"
    )
    print(
        f"deliver: {n} to one consumer, RDY {args.rdy}, FIN batched:"
        f" {deliver_s:.2f} s = {n / deliver_s:,.0f} msg/s"
    )
    print(
        f"channel after: depth={channel['depth']} in_flight={channel['in_flight_count']}"
        f" message_count={channel['message_count']}"
    )
    if args.profile:
        print(f"broker profile written to {args.profile}")


if __name__ == "__main__":
    main()
