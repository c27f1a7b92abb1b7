"""Write the seed corpora in fuzz/corpus/<target>/ (real frames and commands).

Run once after a protocol change: ``python fuzz/make_seeds.py``. The files are
committed; each is small (a few hundred bytes at most).
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gnsqlite.codecs import DeflateCodec, SnappyCodec
from gnsqlite.protocol import commands
from gnsqlite.protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    WireMessage,
    encode_frame,
    encode_message,
)

CORPUS = Path(__file__).resolve().parent / "corpus"
MID = b"0123456789abcdef"
PUB_STREAM = b"PUB t\n" + struct.pack(">i", 5) + b"hello" * 40
MSG = encode_frame(
    FRAME_TYPE_MESSAGE, encode_message(WireMessage(b"0123456789abcdef", b"hello", 1, 1))
)
OK = encode_frame(FRAME_TYPE_RESPONSE, b"OK")
HEARTBEAT = encode_frame(FRAME_TYPE_RESPONSE, b"_heartbeat_")
FEATURES = json.dumps(
    {
        "max_rdy_count": 2500,
        "version": "1.3.0",
        "snappy": True,
        "deflate": False,
        "auth_required": False,
        "msg_timeout": 60000,
    }
).encode()


def seeds() -> dict[str, dict[str, bytes]]:
    identify = commands.identify(
        {
            "client_id": "c",
            "hostname": "h",
            "feature_negotiation": True,
            "heartbeat_interval": 30000,
            "deflate": True,
        }
    )
    ident_body = identify.split(b"\n", 1)[1][4:]
    return {
        "frames": {
            "ok_heartbeat_msg": b"\x03" + OK + HEARTBEAT + MSG,
            "error": b"\x05" + encode_frame(FRAME_TYPE_ERROR, b"E_INVALID invalid command X"),
            "huge_claim": b"\x00" + struct.pack(">ii", 0x7FFFFFFF, 0),
        },
        "client": {
            "identify_ok_sub": b"\x00" + OK + OK + HEARTBEAT + MSG,
            "features_snappy": b"\x01" + encode_frame(FRAME_TYPE_RESPONSE, FEATURES) + OK + OK,
            "auth": b"\x00"
            + encode_frame(FRAME_TYPE_RESPONSE, json.dumps({"auth_required": True}).encode())
            + encode_frame(FRAME_TYPE_RESPONSE, b'{"identity":"i","permission_count":1}')
            + OK,
            "close_wait": b"\x00" + OK + OK + encode_frame(FRAME_TYPE_RESPONSE, b"CLOSE_WAIT"),
        },
        "snappy": {
            "stream": b"\x07" + SnappyCodec().encode(PUB_STREAM),
        },
        "deflate": {
            "stream": b"\x07" + DeflateCodec().encode(PUB_STREAM),
        },
        "command_parser": {
            "identify_sub_rdy_fin": b"\x00"
            + commands.MAGIC_V2
            + identify
            + commands.sub("t", "c")
            + commands.rdy(5)
            + commands.fin(MID)
            + commands.req(MID, 1.0)
            + commands.touch(MID)
            + commands.nop()
            + commands.cls(),
            "pub_mpub_dpub": b"\x03"
            + commands.MAGIC_V2
            + commands.pub("t", b"hello")
            + commands.mpub("t", [b"a", b"bc", b"def"])
            + commands.dpub("t", 1.0, b"later"),
            "mpub_huge_count": b"\x00"
            + commands.MAGIC_V2
            + b"MPUB t\n"
            + struct.pack(">ii", 100, 0x7FFFFFFF),
            "auth": b"\x00" + commands.MAGIC_V2 + commands.auth(b"secret"),
        },
        "identify": {
            "full": ident_body,
            "minimal": b"{}",
            "tls_snappy": json.dumps(
                {
                    "feature_negotiation": True,
                    "tls_v1": True,
                    "snappy": True,
                    "output_buffer_size": 16384,
                    "output_buffer_timeout": 250,
                    "sample_rate": 10,
                    "msg_timeout": 5000,
                }
            ).encode(),
        },
        "http_api": {
            # first byte picks the route (index into the sorted routes) and method bits
            "pub": b"\x08topic=t&defer=100\nhello",
            "mpub_binary": b"\x06topic=t&binary=true\n" + struct.pack(">ii", 1, 5) + b"hello",
            "mpub_lines": b"\x06topic=t\na\nb\n\nc",
            "stats": b"\x09format=json&topic=t&channel=c&include_clients=false\n",
            "channel_create": b"\x00topic=t&channel=c\n",
        },
    }


def main() -> None:
    for target, files in seeds().items():
        folder = CORPUS / target
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (folder / name).write_bytes(data)
    print(f"wrote {sum(len(f) for f in seeds().values())} seeds under {CORPUS}")


if __name__ == "__main__":
    main()
