"""Decode 100,000 message frames of 100-byte bodies and print frames per second.

Not a test: run it by hand, ``python benchmarks/bench_decode.py``. The stream
is fed to :class:`gnsqlite.protocol.FrameDecoder` in 64 KiB chunks, as a
socket would hand it over, and every message frame is decoded into a
:class:`~gnsqlite.protocol.WireMessage`.
"""

from __future__ import annotations

import argparse
import time

from gnsqlite.protocol import (
    FRAME_TYPE_MESSAGE,
    FrameDecoder,
    WireMessage,
    decode_message,
    encode_frame,
    encode_message,
)


def build_stream(count: int, body_size: int) -> bytes:
    body = b"x" * body_size
    return b"".join(
        encode_frame(FRAME_TYPE_MESSAGE, encode_message(WireMessage(b"%016x" % i, body, i, 1)))
        for i in range(count)
    )


def decode_all(stream: bytes, chunk: int) -> int:
    decoder = FrameDecoder()
    decoded = 0
    for pos in range(0, len(stream), chunk):
        decoder.feed(stream[pos : pos + chunk])
        for frame_type, data in decoder.frames():
            if frame_type == FRAME_TYPE_MESSAGE:
                decode_message(data)
                decoded += 1
    return decoded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--body-size", type=int, default=100)
    parser.add_argument("--chunk", type=int, default=65536)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    stream = build_stream(args.count, args.body_size)
    best = float("inf")
    for _ in range(args.repeat):
        start = time.perf_counter()
        decoded = decode_all(stream, args.chunk)
        best = min(best, time.perf_counter() - start)
        if decoded != args.count:
            raise SystemExit(f"decoded {decoded} frames, expected {args.count}")
    print(
        f"decoded {args.count} message frames of {args.body_size} bytes"
        f" ({len(stream) / 1e6:.1f} MB) in {best * 1000:.1f} ms (best of {args.repeat}):"
        f" {args.count / best:,.0f} frames/s"
    )


if __name__ == "__main__":
    main()
