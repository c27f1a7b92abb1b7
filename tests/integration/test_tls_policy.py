"""nsqd's client-certificate policy and TLS floor, on the embedded broker and the real nsqd.

Real TLS with ``trustme`` certificates: the server's CA (``tls_files``) signs
the server certificate and a "good" client certificate; a second CA, unknown to
the server, signs the "stranger" certificate. The flags are nsqd v1.3.0's
``--tls-root-ca-file``, ``--tls-client-auth-policy`` and ``--tls-min-version``.
"""

from __future__ import annotations

import http.client
import json
import shutil
import ssl
import subprocess
from typing import Any

import pytest

from gnsqlite.config import ConnectionConfig
from gnsqlite.connection import Connection
from gnsqlite.errors import NSQError
from gnsqlite.testing import TLSFiles

trustme = pytest.importorskip("trustme")
x509 = pytest.importorskip("cryptography.x509")  # trustme's own dependency


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(cert_file, key_file) of a client certificate from a CA the server does not know."""
    ca = trustme.CA()
    cert = ca.issue_cert("stranger@example.com")
    base = tmp_path_factory.mktemp("stranger")
    cert_file, key_file = str(base / "stranger.pem"), str(base / "stranger.key")
    cert.cert_chain_pems[0].write_to_path(cert_file)
    cert.private_key_pem.write_to_path(key_file)
    return cert_file, key_file


def _tls_server(nsqd_factory: Any, tls_files: Any, **options: Any) -> Any:
    return nsqd_factory(tls_cert=tls_files.cert_file, tls_key=tls_files.key_file, **options)


def _connect(
    server: Any, tls_files: Any, cert: tuple[str, str] | None = None, **options: Any
) -> Connection:
    """A TLS connection trusting the server's CA, presenting ``cert`` if given."""
    if cert is not None:
        options.update(tls_cert_file=cert[0], tls_key_file=cert[1])
    if "tls_context" not in options:
        options["tls_ca_file"] = tls_files.ca_file
    conn = Connection(server.tcp_address, ConnectionConfig(tls_v1=True, **options))
    conn.connect()
    return conn


def _publishes(conn: Connection, tls: bool = True) -> None:
    try:
        assert conn.tls is tls
        assert conn.publish("tls_policy", b"x").get(timeout=5) == b"OK"
    finally:
        conn.close()


def _refused(
    server: Any, tls_files: Any, cert: tuple[str, str] | None = None, **options: Any
) -> None:
    """The handshake (or, under TLS 1.3, the first read after it) fails; nothing published."""
    conn: Connection | None = None
    with pytest.raises(NSQError):
        conn = _connect(server, tls_files, cert, **options)
        conn.publish("tls_policy", b"x").get(timeout=5)
    if conn is not None:
        conn.close()


def _good(tls_files: Any) -> tuple[str, str]:
    return tls_files.client_cert_file, tls_files.client_key_file


def test_root_ca_without_policy_accepts_a_certificate_from_another_ca(
    nsqd_factory: Any, tls_files: Any, stranger: tuple[str, str]
) -> None:
    # nsqd asks for no client certificate unless a policy says so: the root CA
    # file alone checks nothing, so a stranger's certificate is never even sent.
    server = _tls_server(nsqd_factory, tls_files, tls_root_ca_file=tls_files.ca_file)
    _publishes(_connect(server, tls_files, stranger))
    _publishes(_connect(server, tls_files))
    # and TLS stays optional
    plain = Connection(server.tcp_address, ConnectionConfig())
    plain.connect()
    _publishes(plain, tls=False)


def test_require_verify_needs_a_certificate_from_the_root_ca(
    nsqd_factory: Any, tls_files: Any, stranger: tuple[str, str]
) -> None:
    server = _tls_server(
        nsqd_factory,
        tls_files,
        tls_root_ca_file=tls_files.ca_file,
        tls_client_auth_policy="require-verify",
    )
    _refused(server, tls_files)  # no certificate
    _refused(server, tls_files, stranger)  # another CA's
    _publishes(_connect(server, tls_files, _good(tls_files)))


def test_require_takes_a_certificate_from_any_ca_but_not_none(
    nsqd_factory: Any, tls_files: Any, stranger: tuple[str, str]
) -> None:
    server = _tls_server(
        nsqd_factory,
        tls_files,
        tls_root_ca_file=tls_files.ca_file,
        tls_client_auth_policy="require",
    )
    _refused(server, tls_files)
    _publishes(_connect(server, tls_files, stranger))
    _publishes(_connect(server, tls_files, _good(tls_files)))


def _plain_http_ping(server: Any) -> tuple[int, str | None, bytes]:
    """(status, Content-Type, body) of ``GET /ping`` on the plain HTTP port."""
    host, port = server.http_address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        conn.request("GET", "/ping")
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type"), response.read()
    finally:
        conn.close()


def _plain_tcp_refused(server: Any) -> None:
    plain = Connection(server.tcp_address, ConnectionConfig())
    with pytest.raises(NSQError):
        plain.connect()
        plain.publish("tls_policy", b"x").get(timeout=5)
    plain.close()


def test_a_policy_makes_tls_required_on_tcp_and_http(nsqd_factory: Any, tls_files: Any) -> None:
    server = _tls_server(nsqd_factory, tls_files, tls_client_auth_policy="require")
    _plain_tcp_refused(server)
    # nsqd answers any plain HTTP request with 403 and the HTTPS port to use
    status, kind, body = _plain_http_ping(server)
    assert (status, kind) == (403, "application/json; charset=utf-8")
    assert json.loads(body) == {"message": "TLS_REQUIRED", "https_port": server.https_port}


def test_tls_required_tcp_https_leaves_plain_http_open(nsqd_factory: Any, tls_files: Any) -> None:
    server = _tls_server(
        nsqd_factory, tls_files, tls_client_auth_policy="require", tls_required="tcp-https"
    )
    _plain_tcp_refused(server)
    status, _, body = _plain_http_ping(server)
    assert (status, body) == (200, b"OK")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_the_certificate_request_names_the_root_ca(nsqd_factory: Any, tls_files: Any) -> None:
    """As Go's ``ClientCAs``: a Go client then sends only a certificate that CA signed."""
    server = _tls_server(
        nsqd_factory,
        tls_files,
        tls_root_ca_file=tls_files.ca_file,
        tls_client_auth_policy="require",
    )
    with open(tls_files.ca_file, "rb") as pem:
        subject = [str(a.value) for a in x509.load_pem_x509_certificate(pem.read()).subject]
    shown = subprocess.run(
        [
            "openssl",
            "s_client",
            "-connect",
            f"127.0.0.1:{server.https_port}",
            "-CAfile",
            tls_files.ca_file,
        ],
        input=b"",
        capture_output=True,
        timeout=30,
    ).stdout.decode()
    assert "Acceptable client certificate CA names" in shown, shown
    listed = shown.split("Acceptable client certificate CA names", 1)[1].splitlines()[1]
    assert listed, shown
    assert subject and all(value in listed for value in subject), (listed, subject)


def _client_context(tls_files: TLSFiles, maximum: ssl.TLSVersion) -> ssl.SSLContext:
    context = tls_files.client_context()
    context.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    context.maximum_version = maximum
    if maximum < ssl.TLSVersion.TLSv1_2:  # OpenSSL 3 offers TLS 1.0/1.1 only at level 0
        context.set_ciphers("DEFAULT:@SECLEVEL=0")
    return context


def test_tls_min_version_refuses_an_older_client(nsqd_factory: Any, tls_files: Any) -> None:
    server = _tls_server(nsqd_factory, tls_files, tls_min_version="tls1.3")
    _refused(server, tls_files, tls_context=_client_context(tls_files, ssl.TLSVersion.TLSv1_2))
    _publishes(
        _connect(server, tls_files, tls_context=_client_context(tls_files, ssl.TLSVersion.TLSv1_3))
    )


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_the_default_floor_is_tls_1_0(nsqd_factory: Any, tls_files: Any) -> None:
    server = _tls_server(nsqd_factory, tls_files)
    _publishes(
        _connect(server, tls_files, tls_context=_client_context(tls_files, ssl.TLSVersion.TLSv1_1))
    )
