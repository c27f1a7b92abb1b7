"""Certificates for TLS tests: a throwaway CA and a server certificate.

:func:`make_tls_files` uses ``trustme`` (a test dependency, imported only
when called) to write a CA certificate and a certificate plus key for
``127.0.0.1`` and ``localhost`` into a directory, as nsqd's ``--tls-cert``,
``--tls-key`` and ``--tls-root-ca-file`` read them.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Sequence
from dataclasses import dataclass

import gevent.ssl

__all__ = ["TLSFiles", "make_tls_files"]


@dataclass(frozen=True)
class TLSFiles:
    """Paths of PEM files: ``ca_file`` (the CA), ``cert_file`` and ``key_file``
    (the server's), plus ``client_cert_file``/``client_key_file`` (a client
    certificate from the same CA, for ``--tls-client-auth-policy``)."""

    ca_file: str
    cert_file: str
    key_file: str
    client_cert_file: str
    client_key_file: str

    def client_context(self, check_hostname: bool = True) -> ssl.SSLContext:
        """A cooperative (``gevent.ssl``) client context that trusts only this CA."""
        context = gevent.ssl.SSLContext(gevent.ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(cafile=self.ca_file)
        context.check_hostname = check_hostname
        return context


def make_tls_files(
    directory: str | os.PathLike[str],
    hostnames: Sequence[str] = ("127.0.0.1", "localhost"),
) -> TLSFiles:
    """Write a new CA and server certificate for ``hostnames`` into ``directory``."""
    import trustme  # test dependency

    ca = trustme.CA()
    server = ca.issue_cert(*hostnames)
    client = ca.issue_cert("gnsqlite-client@example.com")
    base = os.fspath(directory)
    files = TLSFiles(
        ca_file=os.path.join(base, "ca.pem"),
        cert_file=os.path.join(base, "server.pem"),
        key_file=os.path.join(base, "server.key"),
        client_cert_file=os.path.join(base, "client.pem"),
        client_key_file=os.path.join(base, "client.key"),
    )
    ca.cert_pem.write_to_path(files.ca_file)
    server.cert_chain_pems[0].write_to_path(files.cert_file)
    for pem in server.cert_chain_pems[1:]:
        pem.write_to_path(files.cert_file, append=True)
    server.private_key_pem.write_to_path(files.key_file)
    client.cert_chain_pems[0].write_to_path(files.client_cert_file)
    client.private_key_pem.write_to_path(files.client_key_file)
    return files
