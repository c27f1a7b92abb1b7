"""The pytest plugin: nsqd and nsqlookupd fixtures for your own tests.

Installed with gnsqlite (entry point ``pytest11``), it provides:

* ``nsqd``: a fresh :class:`~gnsqlite.testing.NsqdServer` per test;
* ``nsqlookupd``: a fresh :class:`~gnsqlite.testing.LookupdServer` per test;
* ``nsq_cluster``: a lookupd and three nsqd registered with it
  (``.lookupd``, ``.nsqds``);
* ``nsqd_factory(**options)``: a started nsqd with nsqd's options in Python
  units (``msg_timeout=2.0``, ``snappy=True``, ``lookupd=...``);
* ``fault_proxy(target)``: a started :class:`~gnsqlite.testing.FaultProxy`
  in front of ``target`` (``"host:port"``), to delay, cut, half-close or
  stall connections on command;
* ``tls_files``: a CA and a server certificate for 127.0.0.1/localhost;
* ``auth_server_factory(policy)``: a started :class:`~gnsqlite.testing.AuthServer`.

Everything is stopped when the test ends, and any process still running is
killed at the end of the session. Set ``GNSQLITE_NSQD`` to a directory with
the real ``nsqd`` and ``nsqlookupd`` to run the same tests against them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from .auth import AuthPolicy, AuthServer
from .process import kill_all
from .proxy import FaultProxy
from .servers import LookupdServer, NsqdServer, nsq_bin_dir, start_all
from .tls import TLSFiles, make_tls_files
from .waiting import WaitTimeout, wait_until

__all__ = [
    "NsqCluster",
    "auth_server_factory",
    "fault_proxy",
    "nsq_cluster",
    "nsqd",
    "nsqd_factory",
    "nsqlookupd",
    "pytest_report_header",
    "pytest_sessionfinish",
    "tls_files",
]

CLUSTER_SIZE = 3


@dataclass
class NsqCluster:
    """A lookupd and the nsqd registered with it."""

    lookupd: LookupdServer
    nsqds: list[NsqdServer] = field(default_factory=list)

    def wait_registered(self, timeout: float = 30.0) -> None:
        """Block until lookupd lists every nsqd of :attr:`nsqds` (``timeout`` seconds).

        Registration takes milliseconds; the generous bound covers an nsqd whose
        first IDENTIFY timed out on a loaded machine and is retried. Raises
        :class:`~gnsqlite.testing.WaitTimeout` naming the nodes lookupd did
        list, followed by every process's log tail.
        """
        http = self.lookupd.http
        listed: list[str] = []

        def all_listed() -> bool:
            listed[:] = http.node_addresses()
            return len(listed) == len(self.nsqds)

        try:
            wait_until(all_listed, timeout=timeout, message="every nsqd registered with lookupd")
        except WaitTimeout as exc:
            logs = "".join(
                f"\n--- {server.kind} {server.tcp_address}:\n{server.stderr_text()[-2000:]}"
                for server in (self.lookupd, *self.nsqds)
            )
            raise WaitTimeout(f"{exc}; lookupd listed {listed}{logs}") from None


def pytest_report_header() -> str:
    """Say which nsqd the fixtures run."""
    where = nsq_bin_dir()
    return f"gnsqlite: nsqd = {'real binaries in ' + where if where else 'embedded broker'}"


def pytest_sessionfinish() -> None:
    """Kill any server process a test left running."""
    kill_all()


@pytest.fixture
def nsqlookupd() -> Iterator[LookupdServer]:
    """A running nsqlookupd on free ports."""
    server = LookupdServer()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def nsqd_factory() -> Iterator[Callable[..., NsqdServer]]:
    """``nsqd_factory(**options)`` starts an nsqd; all are stopped after the test."""
    servers: list[NsqdServer] = []

    def factory(**options: Any) -> NsqdServer:
        server = NsqdServer(**options)
        servers.append(server)
        server.start()
        return server

    try:
        yield factory
    finally:
        for server in servers:
            server.close()


@pytest.fixture
def nsqd(nsqd_factory: Callable[..., NsqdServer]) -> NsqdServer:
    """A running nsqd (embedded, or real with ``GNSQLITE_NSQD``) with default options."""
    return nsqd_factory()


@pytest.fixture
def nsq_cluster() -> Iterator[NsqCluster]:
    """A lookupd and three nsqd registered with it, all running."""
    cluster = NsqCluster(LookupdServer())
    try:
        cluster.lookupd.start()
        cluster.nsqds = [NsqdServer(lookupd=cluster.lookupd) for _ in range(CLUSTER_SIZE)]
        start_all(cluster.nsqds)
        cluster.wait_registered()
        yield cluster
    finally:
        for server in cluster.nsqds:
            server.close()
        cluster.lookupd.close()


@pytest.fixture
def fault_proxy() -> Iterator[Callable[[str], FaultProxy]]:
    """``fault_proxy("host:port")`` starts a :class:`FaultProxy` to it; closed after the test."""
    proxies: list[FaultProxy] = []

    def factory(target: str) -> FaultProxy:
        proxy = FaultProxy(target)
        proxies.append(proxy)
        return proxy.start()

    try:
        yield factory
    finally:
        for proxy in proxies:
            proxy.close()


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    """A CA (``.ca_file``) and server certificate (``.cert_file``, ``.key_file``)."""
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def auth_server_factory() -> Iterator[Callable[[AuthPolicy], AuthServer]]:
    """``auth_server_factory(policy)`` starts an :class:`AuthServer`; stopped after the test."""
    servers: list[AuthServer] = []

    def factory(policy: AuthPolicy) -> AuthServer:
        server = AuthServer(policy)
        servers.append(server)
        server.start()
        return server

    try:
        yield factory
    finally:
        for server in servers:
            server.stop()
