"""nsqd and nsqlookupd servers for tests, each in its own process.

:class:`NsqdServer` runs the embedded broker (``python -m gnsqlite.broker``)
or, when the environment variable ``GNSQLITE_NSQD`` names a directory holding
the ``nsqd`` and ``nsqlookupd`` binaries, the real nsqd. Either way it listens
on free ports of 127.0.0.1, keeps its data in a temporary ``--data-path``,
broadcasts ``127.0.0.1``, and is ready when :meth:`NsqdServer.start` returns.
:class:`LookupdServer` does the same for nsqlookupd. Tests observe them only
through TCP and HTTP, so the same test runs against both implementations.

Both are context managers; :meth:`close` stops the process and deletes the
temporary data directory. Ports and data directory are chosen on the first
:meth:`start` and kept, so :meth:`NsqdServer.restart` comes back on the same
addresses with the same data.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any

from ..http import LookupdClient, NsqdHTTPClient
from .flags import lookupd_argv, nsqd_argv, nsqd_flags
from .process import ServerProcess, ServerStartError, free_port

__all__ = ["ENV_NSQ_BIN_DIR", "LookupdServer", "NsqdServer", "nsq_bin_dir", "start_all"]

#: The environment variable naming the directory of the real nsqd binaries.
ENV_NSQ_BIN_DIR = "GNSQLITE_NSQD"

_HOST = "127.0.0.1"
_PORT_RETRIES = 2


def _port_taken(error: ServerStartError) -> bool:
    return "address already in use" in str(error).lower()


def nsq_bin_dir() -> str | None:
    """``$GNSQLITE_NSQD`` if set and non-empty, else ``None`` (use the embedded servers)."""
    return os.environ.get(ENV_NSQ_BIN_DIR) or None


class _Server:
    """What nsqd and nsqlookupd servers share."""

    kind = "server"

    def __init__(self, bin_dir: str | None, startup_timeout: float, stop_timeout: float) -> None:
        self.bin_dir = bin_dir
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.tcp_port = 0
        self.http_port = 0
        self.process: ServerProcess | None = None
        self.last_exit_code: int | None = None
        self._ports_fixed = False  # after the first successful start: restarts keep them

    @property
    def is_real(self) -> bool:
        """``True`` when running the real binary from ``$GNSQLITE_NSQD``."""
        return self.bin_dir is not None

    @property
    def tcp_address(self) -> str:
        """``"127.0.0.1:port"`` for TCP clients (known once started)."""
        return f"{_HOST}:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        """``"127.0.0.1:port"`` of the HTTP API (known once started)."""
        return f"{_HOST}:{self.http_port}"

    @property
    def running(self) -> bool:
        """Whether the process is running."""
        return self.process is not None and self.process.running

    def __repr__(self) -> str:
        real = " real" if self.is_real else ""
        return f"<{type(self).__name__}{real} tcp={self.tcp_address} http={self.http_address}>"

    def _pick_ports(self) -> None:
        if not self.tcp_port:
            self.tcp_port = free_port(_HOST)
        if not self.http_port:
            self.http_port = free_port(_HOST)

    def argv(self) -> list[str]:
        """The command line :meth:`start` runs (choosing ports if not yet chosen)."""
        raise NotImplementedError

    def launch(self) -> None:
        """Start the process without waiting for it; see :meth:`wait_ready`."""
        if self.running:
            return
        self.process = ServerProcess(self.argv(), self.http_address, self.kind)
        self.process.launch()

    def wait_ready(self) -> None:
        """Block until the launched process answers ``/ping`` (``startup_timeout`` s).

        If the first start fails because a port it picked was taken meanwhile
        (another test process got it), it retries on new ports, twice at most.
        """
        if self.process is None:
            self.launch()
        for attempt in range(_PORT_RETRIES + 1):
            try:
                _require(self.process).wait_ready(self.startup_timeout)
            except ServerStartError as exc:
                if self._ports_fixed or attempt == _PORT_RETRIES or not _port_taken(exc):
                    self.stop()
                    raise
                self.stop()
                self._forget_ports()
                self.launch()
            else:
                self._ports_fixed = True
                return

    def start(self) -> None:
        """Start the process and block until ``/ping`` answers.

        Raises :class:`~gnsqlite.testing.ServerStartError` (with the
        process's stderr) if it exits or does not answer in time.
        """
        self.launch()
        self.wait_ready()

    def _forget_ports(self) -> None:
        self.tcp_port = self.http_port = 0

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after ``stop_timeout`` s; returns the exit status."""
        process, self.process = self.process, None
        if process is None:
            return self.last_exit_code
        self.last_exit_code = process.stop(self.stop_timeout)
        process.close()
        return self.last_exit_code

    def restart(self) -> None:
        """Stop and start again on the same ports (nsqd: with the same data path)."""
        self.stop()
        self.start()

    def stderr_text(self) -> str:
        """What the running process has logged so far (last few KB)."""
        return self.process.stderr_text() if self.process is not None else ""

    def close(self) -> None:
        """Stop the process and free what :meth:`start` created."""
        self.stop()

    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _require(process: ServerProcess | None) -> ServerProcess:
    """``process`` itself, which must not be ``None``."""
    if process is None:
        raise RuntimeError("the server process is not running")
    return process


class LookupdServer(_Server):
    """An nsqlookupd process on free ports of 127.0.0.1.

    ``bin_dir`` defaults to ``$GNSQLITE_NSQD``; pass ``""`` to force the
    embedded server.
    """

    kind = "nsqlookupd"

    def __init__(
        self,
        bin_dir: str | None = None,
        startup_timeout: float = 15.0,
        stop_timeout: float = 5.0,
    ) -> None:
        super().__init__(
            nsq_bin_dir() if bin_dir is None else (bin_dir or None), startup_timeout, stop_timeout
        )

    def argv(self) -> list[str]:
        """The command line :meth:`start` runs."""
        self._pick_ports()
        return lookupd_argv(
            tcp_address=self.tcp_address,
            http_address=self.http_address,
            bin_dir=self.bin_dir,
        )

    @property
    def http(self) -> LookupdClient:
        """A client of this lookupd's HTTP API."""
        return LookupdClient(self.http_address)

    def __enter__(self) -> LookupdServer:
        self.start()
        return self


class NsqdServer(_Server):
    """An nsqd process (embedded or real) on free ports of 127.0.0.1.

    ``options`` are nsqd's flags in Python units (see
    :func:`~gnsqlite.testing.flags.nsqd_flags`): ``msg_timeout=2.0``,
    ``snappy=True``, ``tls_cert=path``, ``auth_http_address="127.0.0.1:p"``,
    ``max_rdy_count=10``, ...; ``lookupd`` is a :class:`LookupdServer` (or
    its TCP address, or a list) to register with. ``data_path`` defaults to
    a temporary directory removed by :meth:`close`. ``bin_dir`` defaults to
    ``$GNSQLITE_NSQD``; pass ``""`` to force the embedded broker.
    """

    kind = "nsqd"

    def __init__(
        self,
        lookupd: LookupdServer | str | Sequence[LookupdServer | str] | None = None,
        data_path: str | None = None,
        bin_dir: str | None = None,
        startup_timeout: float = 15.0,
        stop_timeout: float = 5.0,
        **options: Any,
    ) -> None:
        super().__init__(
            nsq_bin_dir() if bin_dir is None else (bin_dir or None), startup_timeout, stop_timeout
        )
        self.lookupd = lookupd
        self.options = dict(options)
        self.data_path = data_path
        self._own_data_path = False
        self.https_port = 0
        nsqd_flags({"lookupd": lookupd, **self.options})  # validate now, not at start

    def argv(self) -> list[str]:
        """The command line :meth:`start` runs (creating the data directory if needed)."""
        self._pick_ports()
        if self.data_path is None:
            self.data_path = tempfile.mkdtemp(prefix="gnsqlite-nsqd-")
            self._own_data_path = True
        https_address = None
        if self.is_real or self.options.get("tls_cert") is not None:  # both serve HTTPS then
            if not self.https_port:
                self.https_port = free_port(_HOST)
            https_address = f"{_HOST}:{self.https_port}"
        return nsqd_argv(
            tcp_address=self.tcp_address,
            http_address=self.http_address,
            data_path=self.data_path,
            options={"lookupd": self.lookupd, **self.options},
            bin_dir=self.bin_dir,
            https_address=https_address,
        )

    def _forget_ports(self) -> None:
        super()._forget_ports()
        self.https_port = 0

    @property
    def http(self) -> NsqdHTTPClient:
        """A client of this nsqd's HTTP API."""
        return NsqdHTTPClient(self.http_address)

    def stats(self, topic: str | None = None, channel: str | None = None) -> dict[str, Any]:
        """``/stats?format=json`` (v1.x shape), optionally filtered; blocks up to 5 s."""
        return self.http.stats(topic=topic, channel=channel)

    def topic_stats(self, topic: str) -> dict[str, Any]:
        """The ``/stats`` entry of ``topic``, or ``{}`` when nsqd has no such topic."""
        for entry in self.stats().get("topics") or []:
            if entry["topic_name"] == topic:
                return dict(entry)
        return {}

    def channel_stats(self, topic: str, channel: str) -> dict[str, Any]:
        """The ``/stats`` entry of ``channel`` of ``topic``, or ``{}`` when it does not exist."""
        for entry in self.topic_stats(topic).get("channels") or []:
            if entry["channel_name"] == channel:
                return dict(entry)
        return {}

    def channel_drained(self, topic: str, channel: str) -> bool:
        """True when the channel exists and holds nothing: no depth, in flight or deferred."""
        c = self.channel_stats(topic, channel)
        return (
            bool(c) and c["depth"] == 0 and c["in_flight_count"] == 0 and c["deferred_count"] == 0
        )

    def close(self) -> None:
        """Stop the process and delete the temporary data directory."""
        self.stop()
        if self._own_data_path and self.data_path is not None:
            shutil.rmtree(self.data_path, ignore_errors=True)
            self.data_path = None
            self._own_data_path = False

    def __enter__(self) -> NsqdServer:
        self.start()
        return self


def start_all(servers: Iterable[_Server]) -> None:
    """Start several servers at once: launch every process, then wait for each.

    If one fails to start, the others are stopped before the error propagates.
    """
    servers = list(servers)
    try:
        for server in servers:
            server.launch()
        for server in servers:
            server.wait_ready()
    except BaseException:
        for server in servers:
            server.stop()
        raise
