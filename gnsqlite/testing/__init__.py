"""Test helpers for code that uses NSQ: servers, fixtures, certificates, waiting.

* :class:`NsqdServer` / :class:`LookupdServer`: nsqd and nsqlookupd in child
  processes on free ports, the embedded ones or, with ``GNSQLITE_NSQD`` set to
  a directory of binaries, the real ones.
* :class:`AuthServer`: an nsqd auth server answering from a Python policy.
* :func:`make_tls_files`: a throwaway CA and server certificate (trustme).
* :class:`FaultProxy`: a TCP proxy that delays, cuts (RST), half-closes or
  stalls its connections on command; :class:`PieceProxy` hands the server's
  bytes to the client a few at a time, to prove a client copes with reads
  that end anywhere.
* :mod:`gnsqlite.testing.proxy_process`: a :class:`FaultProxy` in a child
  process, so a run that measures its memory does not count the proxy's;
  :mod:`gnsqlite.testing.memory`: live objects by class and traced memory
  by owner, for leak tests and the soak.
* :func:`wait_until`: poll a condition with a timeout instead of sleeping;
  :class:`HubStalls`: how long the hub did not run (a loaded machine).
* :mod:`gnsqlite.testing.plugin`: the pytest fixtures (``nsqd``,
  ``nsqlookupd``, ``nsq_cluster``, ``nsqd_factory``, ``fault_proxy``,
  ``tls_files``, ``auth_server_factory``), registered automatically by the ``pytest11``
  entry point.

Importing this package starts nothing and patches nothing.
"""

from __future__ import annotations

from .auth import AuthPolicy, AuthServer, grant
from .flags import go_duration, lookupd_argv, nsqd_argv, nsqd_flags
from .process import ServerProcess, ServerStartError, free_port, kill_all
from .proxy import FaultProxy, PieceProxy, ProxiedConnection
from .servers import ENV_NSQ_BIN_DIR, LookupdServer, NsqdServer, nsq_bin_dir, start_all
from .tls import TLSFiles, make_tls_files
from .waiting import HubStalls, WaitTimeout, wait_until

__all__ = [
    "ENV_NSQ_BIN_DIR",
    "AuthPolicy",
    "AuthServer",
    "LookupdServer",
    "NsqdServer",
    "FaultProxy",
    "HubStalls",
    "PieceProxy",
    "ProxiedConnection",
    "ServerProcess",
    "ServerStartError",
    "TLSFiles",
    "WaitTimeout",
    "free_port",
    "go_duration",
    "grant",
    "kill_all",
    "lookupd_argv",
    "make_tls_files",
    "nsq_bin_dir",
    "nsqd_argv",
    "nsqd_flags",
    "start_all",
    "wait_until",
]
