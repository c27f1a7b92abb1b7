"""Golden transcripts: scripted raw-byte sessions against nsqd and nsqlookupd.

Each script (see ``golden_scripts.py``) is a list of small declarative steps:
open a TCP connection, send these bytes, read N frames, read until the server
closes, expect nothing for a bounded time, switch the connection to TLS,
snappy or deflate, make one HTTP request. :func:`play` runs a script against
a set of servers and returns what came back, **normalised**: message ids
become ``<id1>``, ``<id2>`` ... in order of first appearance, message
timestamps ``<ts>``, ports ``<port>``, and JSON values that vary per run
(versions, hostnames, start times, memory figures, ...) become a placeholder
naming their JSON type, so keys, types and structure are still compared.
Frames are recorded decoded (after TLS or decompression), never as the
socket writes that carried them.

Record the transcripts from the real NSQ binaries (rewrites
``tests/golden/recordings/*.json``)::

    PYTHONPATH=$PWD python tests/golden/record.py --nsqd-bin ../shared/nsq/bin

Replay them against the embedded broker (or ``--nsqd-bin DIR``) and print a
diff for each script that answers differently, without writing anything::

    PYTHONPATH=$PWD python tests/golden/record.py --check [-k NAME]

``tests/golden/test_golden.py`` does the same check on every test run.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import re
import shutil
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import gevent
import gevent.socket
import gevent.ssl

from gnsqlite.codecs import Codec, make_codec
from gnsqlite.testing import LookupdServer, NsqdServer
from gnsqlite.testing.servers import start_all
from gnsqlite.testing.tls import TLSFiles, make_tls_files

HERE = os.path.dirname(os.path.abspath(__file__))
RECORDINGS = os.path.join(HERE, "recordings")

#: How long a read waits for frames (seconds) before recording a timeout.
READ_TIMEOUT = 5.0

# -- steps -------------------------------------------------------------------


@dataclass(frozen=True)
class Connect:
    """Open TCP connection ``conn`` to the nsqd (sending the V2 magic unless ``magic=False``)."""

    conn: str = "c"
    magic: bool = True


@dataclass(frozen=True)
class Send:
    """Send raw bytes; ``<idN>`` in them stands for the N-th message id received."""

    data: bytes
    conn: str = "c"


@dataclass(frozen=True)
class Read:
    """Read ``n`` frames (a close or a timeout ends the read early and is recorded)."""

    n: int = 1
    conn: str = "c"


@dataclass(frozen=True)
class UntilClosed:
    """Read frames until the server closes the connection."""

    conn: str = "c"


@dataclass(frozen=True)
class Quiet:
    """Expect nothing for ``seconds``; whatever does arrive (or a close) is recorded."""

    seconds: float = 0.3
    conn: str = "c"


@dataclass(frozen=True)
class Upgrade:
    """Switch the client side of ``conn`` to ``"tls"``, ``"snappy"`` or ``"deflate"``."""

    kind: str
    conn: str = "c"
    level: int = 6


@dataclass(frozen=True)
class Http:
    """One HTTP/1.0 request to ``server`` (``"nsqd"`` or ``"lookupd"``)."""

    method: str
    path: str
    body: bytes = b""
    server: str = "nsqd"


@dataclass(frozen=True)
class WaitHttp:
    """Poll ``GET path`` until its body contains ``needle`` (not recorded unless it fails)."""

    path: str
    needle: str
    server: str = "lookupd"
    timeout: float = 10.0


Step = Connect | Send | Read | UntilClosed | Quiet | Upgrade | Http | WaitHttp


@dataclass(frozen=True)
class Script:
    """A named session against one server setup (see :data:`SETUPS`)."""

    name: str
    steps: Sequence[Step]
    setup: str = "default"
    doc: str = ""


#: nsqd options per setup; a setup with ``lookupd`` also starts an nsqlookupd.
SETUPS: dict[str, dict[str, Any]] = {
    "default": {"tls": True},
    "limits": {"max_channel_consumers": 1},
    "stats": {},
    "cluster": {"lookupd": True},
}

# -- servers -----------------------------------------------------------------


@dataclass
class Setup:
    """The running servers of one setup."""

    nsqd: NsqdServer
    lookupd: LookupdServer | None
    tls: TLSFiles | None

    def ports(self) -> list[int]:
        servers: list[Any] = [self.nsqd, self.lookupd]
        out = []
        for server in servers:
            if server is not None:
                out += [server.tcp_port, server.http_port]
        if self.nsqd.https_port:
            out.append(self.nsqd.https_port)
        return out


class Servers:
    """Starts each setup's servers on first use; :meth:`close` stops them all.

    ``bin_dir`` names the real binaries' directory; ``""`` forces the
    embedded broker.
    """

    def __init__(self, bin_dir: str) -> None:
        self.bin_dir = bin_dir
        self.setups: dict[str, Setup] = {}
        self._tmp = tempfile.mkdtemp(prefix="gnsqlite-golden-")
        self._tls: TLSFiles | None = None

    def tls_files(self) -> TLSFiles:
        if self._tls is None:
            self._tls = make_tls_files(self._tmp)
        return self._tls

    def get(self, name: str) -> Setup:
        setup = self.setups.get(name)
        if setup is not None:
            return setup
        options = dict(SETUPS[name])
        lookupd = LookupdServer(bin_dir=self.bin_dir) if options.pop("lookupd", False) else None
        tls = None
        if options.pop("tls", False):
            tls = self.tls_files()
            options.update(tls_cert=tls.cert_file, tls_key=tls.key_file)
        nsqd = NsqdServer(lookupd=lookupd, bin_dir=self.bin_dir, **options)
        start_all([s for s in (lookupd, nsqd) if s is not None])
        setup = self.setups[name] = Setup(nsqd, lookupd, tls)
        return setup

    def close(self) -> None:
        for setup in self.setups.values():
            setup.nsqd.close()
            if setup.lookupd is not None:
                setup.lookupd.close()
        self.setups.clear()
        shutil.rmtree(self._tmp, ignore_errors=True)


# -- normalisation -------------------------------------------------------------

#: JSON keys whose values vary per run: replaced by ``<type>`` placeholders.
VARYING_KEYS = frozenset(
    {
        "version",
        "start_time",
        "hostname",
        "tcp_port",
        "http_port",
        "remote_address",
        "remote_addresses",
        "connect_ts",
        "last_update",
        "tls_cipher_suite",
        "tls_version",
        "memory",
        "uptime",
        "uptime_seconds",
    }
)
_HOSTNAMES = tuple({socket.gethostname(), socket.getfqdn()} - {"", "localhost"})
_ADDRESS = re.compile(r"(127\.0\.0\.1|localhost|\[::1\]):\d+")


def _type_name(value: Any) -> str:
    if value is None:
        return "<null>"
    if isinstance(value, bool):
        return "<bool>"
    if isinstance(value, (int, float)):
        return "<number>"
    if isinstance(value, str):
        return "<string>"
    if isinstance(value, list):
        return "<list>"
    return "<object>"


class Normaliser:
    """Replaces what varies per run by stable tokens, remembering message ids."""

    def __init__(self, ports: Iterable[int]) -> None:
        self.ports = sorted({str(p) for p in ports if p}, key=len, reverse=True)
        self.ids: dict[bytes, str] = {}

    def id_token(self, message_id: bytes) -> str:
        token = self.ids.get(message_id)
        if token is None:
            token = self.ids[message_id] = f"<id{len(self.ids) + 1}>"
        return token

    def substitute(self, data: bytes) -> bytes:
        """Put the real message ids back where a script wrote ``<idN>``."""
        for raw, token in self.ids.items():
            data = data.replace(token.encode(), raw)
        return data

    def text(self, text: str) -> str:
        for raw, token in self.ids.items():
            text = text.replace(raw.decode("latin-1"), token)
        text = _ADDRESS.sub(lambda m: f"{m.group(1)}:<port>", text)
        for port in self.ports:  # after a colon only: a number sent (60001) may equal a port
            text = re.sub(rf"(?<=:){port}(?!\d)", "<port>", text)
        for name in _HOSTNAMES:
            text = text.replace(name, "<hostname>")
        return text

    def json(self, value: Any, key: str = "") -> Any:
        if key in VARYING_KEYS:
            if isinstance(value, dict):
                return {k: _type_name(v) for k, v in sorted(value.items())}
            return _type_name(value)
        if isinstance(value, dict):
            value = dict(value)
            if isinstance(value.get("topics"), list) and isinstance(value.get("tombstones"), list):
                # lookupd's /nodes: parallel lists in Go map order; sort them together
                pairs = sorted(zip(value["topics"], value["tombstones"], strict=True))
                value["topics"] = [p[0] for p in pairs]
                value["tombstones"] = [p[1] for p in pairs]
            return {k: self.json(v, k) for k, v in value.items()}
        if isinstance(value, list):
            items = [self.json(v) for v in value]
            if key in ("topics", "channels", "producers", "clients") and all(
                isinstance(v, str) for v in items
            ):
                items.sort()  # Go map order
            return items
        if isinstance(value, str):
            return self.text(value)
        return value

    def body(self, data: bytes) -> Any:
        """A response or HTTP body: JSON as a normalised object, else text."""
        stripped = data.strip()
        if stripped[:1] in (b"{", b"["):
            try:
                return {"json": self.json(json.loads(stripped))}
            except ValueError:
                pass
        return show(data, self)


def show(data: bytes, norm: Normaliser | None = None) -> str:
    """Bytes as readable text: printable ASCII kept, the rest escaped like Python."""
    text = repr(bytes(data))[2:-1].replace('\\"', '"').replace("\\'", "'")
    return norm.text(text) if norm is not None else text


# -- the TCP client --------------------------------------------------------------


class Closed(Exception):
    """The server closed the connection."""


class Conn:
    """A raw socket plus what the client side negotiated (TLS, a codec)."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock: Any = gevent.socket.create_connection(address, timeout=READ_TIMEOUT)
        self.codec: Codec | None = None
        self.buf = bytearray()  # decoded, not yet framed
        self.raw_pending = b""  # received, not yet decoded (at an upgrade)
        self.closed = False

    def send(self, data: bytes) -> None:
        if self.codec is not None:
            data = self.codec.encode(data)
        self.sock.sendall(data)

    def _recv(self) -> None:
        if self.closed:
            raise Closed()
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        if not data:
            self.closed = True
            raise Closed()
        self.buf += self.codec.decode(data) if self.codec is not None else data

    def frame(self, deadline: float) -> tuple[int, bytes] | bytes:
        """The next frame, or raw bytes when what came is not a frame."""
        while True:
            if len(self.buf) >= 4:
                size = struct.unpack_from(">i", self.buf)[0]
                if not 4 <= size <= 64 * 1024 * 1024:
                    raw = bytes(self.buf)
                    self.buf.clear()
                    return raw
                if len(self.buf) >= 4 + size:
                    frame_type = struct.unpack_from(">i", self.buf, 4)[0]
                    data = bytes(self.buf[8 : 4 + size])
                    del self.buf[: 4 + size]
                    return frame_type, data
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise gevent.Timeout()
            with gevent.Timeout(remaining):
                self._recv()

    def upgrade(self, kind: str, level: int, tls: TLSFiles | None) -> None:
        if kind == "tls":
            if tls is None:
                raise ValueError("this setup has no TLS certificate")
            if self.buf:
                raise ValueError("bytes after the IDENTIFY response before the TLS handshake")
            context = tls.client_context()
            self.sock = context.wrap_socket(self.sock, server_hostname="127.0.0.1")
            return
        self.codec = make_codec(kind, level)
        rest = bytes(self.buf)
        self.buf.clear()
        if rest:
            self.buf += self.codec.decode(rest)

    def close(self) -> None:
        self.sock.close()


# -- playing ---------------------------------------------------------------------

_FRAME_NAMES = {0: "response", 1: "error", 2: "message"}


def _frame_item(frame: tuple[int, bytes] | bytes, norm: Normaliser) -> dict[str, Any]:
    if isinstance(frame, bytes):
        return {"raw": show(frame, norm)}
    frame_type, data = frame
    if frame_type == 2 and len(data) >= 26:
        timestamp, attempts, message_id = struct.unpack_from(">qH16s", data)
        token = norm.id_token(message_id)
        late = abs(time.time_ns() - timestamp) > 600e9
        return {
            "message": {
                "timestamp": "<ts>" if not late else f"<ts off by {time.time_ns() - timestamp}>",
                "attempts": attempts,
                "id": token,
                "body": show(data[26:], norm),
            }
        }
    name = _FRAME_NAMES.get(frame_type, f"frame type {frame_type}")
    if frame_type == 1:
        return {name: show(data, norm)}
    return {name: norm.body(data)}


def _read(conn: Conn, n: int | None, seconds: float, norm: Normaliser) -> list[Any]:
    """Up to ``n`` frames (``None``: until close) within ``seconds``."""
    got: list[Any] = []
    deadline = time.monotonic() + seconds
    while n is None or len(got) < n:
        try:
            got.append(_frame_item(conn.frame(deadline), norm))
        except Closed:
            if conn.buf:
                got.append({"raw": show(bytes(conn.buf), norm)})
                conn.buf.clear()
            got.append("closed")
            break
        except gevent.Timeout:
            got.append("timeout")
            break
    return got


def _http(address: str, method: str, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
    host, port = address.rsplit(":", 1)
    request = f"{method} {path} HTTP/1.0\r\nHost: {address}\r\n"
    if body or method in ("POST", "PUT"):
        request += f"Content-Length: {len(body)}\r\n"
    data = (request + "\r\n").encode() + body
    chunks = []
    with gevent.Timeout(READ_TIMEOUT), gevent.socket.create_connection((host, int(port))) as sock:
        # the server may answer (and close) before reading the whole body
        with contextlib.suppress(OSError):
            sock.sendall(data)
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break  # after answering, nsqd may drop a body it did not read
            if not chunk:
                break
            chunks.append(chunk)
    answer = b"".join(chunks)
    if not answer:
        return 0, {}, b""
    head, _, payload = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, payload


_RECORDED_HEADERS = ("content-type", "x-nsq-content-type")


def _server_address(setup: Setup, name: str) -> str:
    server = setup.nsqd if name == "nsqd" else setup.lookupd
    if server is None:
        raise ValueError(f"this setup has no {name}")
    return server.http_address


def play(script: Script, setup: Setup) -> list[dict[str, Any]]:
    """Run ``script`` against ``setup``; returns the normalised transcript (blocks)."""
    norm = Normaliser(setup.ports())
    conns: dict[str, Conn] = {}
    out: list[dict[str, Any]] = []
    try:
        for step in script.steps:
            out.append(_play_step(step, setup, conns, norm))
    finally:
        for conn in conns.values():
            conn.close()
    return out


def _play_step(
    step: Step, setup: Setup, conns: dict[str, Conn], norm: Normaliser
) -> dict[str, Any]:
    if isinstance(step, Connect):
        conn = conns[step.conn] = Conn(("127.0.0.1", setup.nsqd.tcp_port))
        if step.magic:
            conn.send(b"  V2")
        return {"connect": step.conn}
    if isinstance(step, Http):
        status, headers, payload = _http(
            _server_address(setup, step.server),
            step.method,
            step.path.replace("{nsqd_http}", setup.nsqd.http_address),
            step.body,
        )
        return {
            "http": f"{step.server} {step.method} {step.path}"
            + (f" <{show(step.body[:80])}>" if step.body else ""),
            "status": status,
            "headers": {k: headers[k] for k in _RECORDED_HEADERS if k in headers},
            "body": norm.body(payload),
        }
    if isinstance(step, WaitHttp):
        address = _server_address(setup, step.server)
        deadline = time.monotonic() + step.timeout
        payload = b""
        while time.monotonic() < deadline:
            _, _, payload = _http(address, "GET", step.path, b"")
            if step.needle.encode() in payload:
                return {"wait": f"{step.server} {step.path} has {step.needle}"}
            gevent.sleep(0.05)
        return {
            "wait": f"{step.server} {step.path} has {step.needle}",
            "failed": norm.body(payload),
        }
    conn = conns[step.conn]
    prefix = f"{step.conn}: " if step.conn != "c" else ""
    if isinstance(step, Send):
        try:
            conn.send(norm.substitute(step.data))
        except OSError as exc:
            return {"send": prefix + show(step.data), "failed": type(exc).__name__}
        return {"send": prefix + show(step.data)}
    if isinstance(step, Read):
        return {"read": f"{prefix}{step.n}", "got": _read(conn, step.n, READ_TIMEOUT, norm)}
    if isinstance(step, UntilClosed):
        return {"read": f"{prefix}until closed", "got": _read(conn, None, READ_TIMEOUT, norm)}
    if isinstance(step, Quiet):
        got = _read(conn, None, step.seconds, norm)
        if got == ["timeout"]:
            got = []
        return {"quiet": f"{prefix}{step.seconds}", "got": got}
    if isinstance(step, Upgrade):
        conn.upgrade(step.kind, step.level, setup.tls)
        return {"upgrade": prefix + step.kind}
    raise TypeError(f"unknown step {step!r}")


# -- files -------------------------------------------------------------------------


def recording_path(script: Script) -> str:
    return os.path.join(RECORDINGS, script.name + ".json")


def dump(script: Script, transcript: list[dict[str, Any]]) -> str:
    """The committed text of a recording."""
    doc = {
        "script": script.name,
        "doc": script.doc,
        "setup": script.setup,
        "transcript": transcript,
    }
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def load(script: Script) -> str | None:
    try:
        with open(recording_path(script), encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def diff(expected: str, actual: str, name: str) -> str:
    """A unified diff of a recording and a replay."""
    return "".join(
        difflib.unified_diff(
            expected.splitlines(True),
            actual.splitlines(True),
            f"recorded/{name}.json",
            f"replayed/{name}.json",
        )
    )


def select(scripts: Iterable[Script], pattern: str | None) -> Iterator[Script]:
    for script in scripts:
        if pattern is None or pattern in script.name:
            yield script


def main(argv: Sequence[str] | None = None) -> int:
    """Record (with ``--nsqd-bin``) or check (``--check``) the golden transcripts."""
    from golden_scripts import SCRIPTS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nsqd-bin", default="", help="directory of the real nsqd/nsqlookupd")
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("-k", dest="pattern", help="only scripts whose name contains this")
    args = parser.parse_args(argv)
    if not args.check and not args.nsqd_bin:
        parser.error("recording needs --nsqd-bin (the real nsqd); use --check to compare")
    servers = Servers(args.nsqd_bin)
    failed = 0
    try:
        os.makedirs(RECORDINGS, exist_ok=True)
        for script in select(SCRIPTS, args.pattern):
            text = dump(script, play(script, servers.get(script.setup)))
            if args.check:
                expected = load(script) or ""
                if expected != text:
                    failed += 1
                    print(diff(expected, text, script.name))
            else:
                with open(recording_path(script), "w", encoding="utf-8") as f:
                    f.write(text)
                print("recorded", script.name)
    finally:
        servers.close()
    if args.check:
        print(f"{failed} script(s) differ")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    import record  # the scripts import the step classes from ``record``, not ``__main__``

    sys.exit(record.main())
