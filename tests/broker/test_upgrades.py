"""TLS, snappy, deflate and AUTH on the embedded broker, driven from a raw socket."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import trustme
from nsqd_raw import RawClient

from gnsqlite.broker import Broker
from gnsqlite.broker.client import ClientSession

pytestmark = pytest.mark.embedded_only


def tcp_sessions(broker: Broker) -> list[ClientSession]:
    """The broker's client sessions, each the TCP ClientSession behind the Session protocol."""
    sessions = [s for s in broker.clients if isinstance(s, ClientSession)]
    assert len(sessions) == len(broker.clients), broker.clients
    return sessions


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    d = tmp_path_factory.mktemp("certs")
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    cert.private_key_pem.write_to_path(str(d / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(d / "cert.pem"))
    return {"ca": str(d / "ca.pem"), "cert": str(d / "cert.pem"), "key": str(d / "key.pem")}


def raw(broker: Broker) -> RawClient:
    assert broker.tcp_address is not None
    return RawClient(broker.tcp_address)


def roundtrip(broker: Broker, c: RawClient) -> None:
    """SUB, PUB through another connection, receive, FIN over the upgraded stream."""
    c.sub("up", "ch", rdy=1)
    with raw(broker) as p:
        p.pub("up", b"x" * 3000)
    m = c.message()
    assert m.body == b"x" * 3000
    c.fin(m.id)
    c.command(b"NOP")
    c.pub("elsewhere", b"from upgraded")


def test_tls_upgrade(make_broker: Callable[..., Broker], certs: dict[str, str]) -> None:
    broker = make_broker(tls_cert=certs["cert"], tls_key=certs["key"])
    with raw(broker) as c:
        assert c.negotiate(tls_v1=True)["tls_v1"] is True
        c.upgrade_tls(certs["ca"])
        roundtrip(broker, c)
        assert any(cl.tls and cl.tls_version for cl in tcp_sessions(broker))


def test_tls_not_offered_without_certificate(broker: Broker) -> None:
    with raw(broker) as c:
        assert c.negotiate(tls_v1=True)["tls_v1"] is False
        c.pub("t", b"plain")


def test_tls_required_refuses_other_commands_first(
    make_broker: Callable[..., Broker], certs: dict[str, str]
) -> None:
    broker = make_broker(tls_cert=certs["cert"], tls_key=certs["key"], tls_required=True)
    with raw(broker) as c:
        c.command(b"PUB t", b"x")
        assert c.error() == b"E_INVALID cannot PUB in current state (TLS required)"
        c.assert_closed()
    with raw(broker) as c:
        c.negotiate(tls_v1=True)
        c.upgrade_tls(certs["ca"])
        c.pub("t", b"secure")


@pytest.mark.parametrize("kind", ["snappy", "deflate"])
def test_compression_upgrade(broker: Broker, kind: str) -> None:
    with raw(broker) as c:
        answer = c.negotiate(**{kind: True, "deflate_level": 3})
        assert answer[kind] is True
        c.upgrade_codec(kind, answer["deflate_level"])
        roundtrip(broker, c)


def test_deflate_level_is_capped(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(max_deflate_level=4)
    with raw(broker) as c:
        answer = c.negotiate(deflate=True, deflate_level=9)
        assert (answer["deflate_level"], answer["max_deflate_level"]) == (4, 4)
        c.upgrade_codec("deflate", 4)
        roundtrip(broker, c)


def test_snappy_and_deflate_together_are_refused(broker: Broker) -> None:
    with raw(broker) as c:
        c.command(b"IDENTIFY", b'{"feature_negotiation":true,"snappy":true,"deflate":true}')
        assert c.error() == b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"
        c.assert_closed()


def test_tls_then_snappy(make_broker: Callable[..., Broker], certs: dict[str, str]) -> None:
    broker = make_broker(tls_cert=certs["cert"], tls_key=certs["key"])
    with raw(broker) as c:
        c.negotiate(tls_v1=True, snappy=True)
        c.upgrade_tls(certs["ca"])
        c.upgrade_codec("snappy")
        roundtrip(broker, c)


def test_disabled_snappy_is_not_offered(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(snappy=False)
    with raw(broker) as c:
        assert c.negotiate(snappy=True)["snappy"] is False
        c.pub("t", b"plain")


# -- AUTH -------------------------------------------------------------------

GRANT = {
    "ttl": 3600,
    "identity": "alice",
    "identity_url": "https://example.invalid/alice",
    "authorizations": [
        {"topic": "^allowed$", "channels": [".*"], "permissions": ["subscribe", "publish"]},
        {"topic": "^readonly$", "channels": ["^ch$"], "permissions": ["subscribe"]},
    ],
}


class _AuthHandler(BaseHTTPRequestHandler):
    queries: list[dict[str, list[str]]]

    def do_GET(self) -> None:
        url = urlparse(self.path)
        params = parse_qs(url.query, keep_blank_values=True)
        type(self).queries.append({"path": [url.path], **params})
        if url.path == "/auth" and params.get("secret") == ["good"]:
            body = json.dumps(GRANT).encode()
            self.send_response(200)
        else:
            body = b'{"message":"NOT_AUTHORIZED"}'
            self.send_response(403)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def auth_server() -> Iterator[tuple[str, list[dict[str, list[str]]]]]:
    """A real nsqd-style auth server in a thread (answers while the hub is busy)."""
    queries: list[dict[str, list[str]]] = []
    handler = type("Handler", (_AuthHandler,), {"queries": queries})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}", queries
    server.shutdown()
    server.server_close()


def test_auth_with_http_server(
    make_broker: Callable[..., Broker], auth_server: tuple[str, list[dict[str, list[str]]]]
) -> None:
    address, queries = auth_server
    broker = make_broker(auth_http_addresses=[address])
    with raw(broker) as c:
        assert c.negotiate()["auth_required"] is True
        c.command(b"AUTH", b"good")
        answer = json.loads(c.response())
        assert answer == {
            "identity": "alice",
            "identity_url": "https://example.invalid/alice",
            "permission_count": 2,
        }
        c.pub("allowed", b"yes")
        c.sub("allowed", "any")
    assert queries[0]["path"] == ["/auth"]
    assert queries[0]["secret"] == ["good"]
    assert queries[0]["tls"] == ["false"]
    assert queries[0]["remote_ip"] == ["127.0.0.1"]


def test_auth_refused_by_server(
    make_broker: Callable[..., Broker], auth_server: tuple[str, list[dict[str, list[str]]]]
) -> None:
    broker = make_broker(auth_http_addresses=[auth_server[0]])
    with raw(broker) as c:
        c.command(b"AUTH", b"bad")
        assert c.error() == b"E_AUTH_FAILED AUTH failed"
        c.assert_closed()


def test_commands_before_auth_are_refused(
    make_broker: Callable[..., Broker], auth_server: tuple[str, list[dict[str, list[str]]]]
) -> None:
    broker = make_broker(auth_http_addresses=[auth_server[0]])
    with raw(broker) as c:
        c.command(b"PUB allowed", b"x")
        assert c.error() == b"E_AUTH_FIRST AUTH required before PUB"
        c.assert_closed()
    with raw(broker) as c:
        c.command(b"SUB allowed ch")
        assert c.error() == b"E_AUTH_FIRST AUTH required before SUB"
        c.assert_closed()


def test_unauthorized_topic(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(auth_policy=lambda ip, tls, secret: GRANT if secret == "s" else None)
    with raw(broker) as c:
        c.command(b"AUTH", b"s")
        c.response()
        c.command(b"PUB readonly", b"x")
        assert c.error() == b'E_UNAUTHORIZED AUTH failed for PUB on "readonly" ""'
        c.assert_closed()
    with raw(broker) as c:
        c.command(b"AUTH", b"s")
        c.response()
        c.command(b"SUB readonly other")
        assert c.error() == b'E_UNAUTHORIZED AUTH failed for SUB on "readonly" "other"'
        c.assert_closed()
    with raw(broker) as c:
        c.command(b"AUTH", b"s")
        c.response()
        c.sub("readonly", "ch")


def test_auth_policy_refusal_and_empty_grant(make_broker: Callable[..., Broker]) -> None:
    answers: dict[str, Any] = {"none": None, "empty": {"ttl": 10, "authorizations": []}}
    broker = make_broker(auth_policy=lambda ip, tls, secret: answers[secret])
    with raw(broker) as c:
        c.command(b"AUTH", b"none")
        assert c.error() == b"E_AUTH_FAILED AUTH failed"
    with raw(broker) as c:
        c.command(b"AUTH", b"empty")
        assert c.error() == b"E_UNAUTHORIZED AUTH no authorizations found"
        c.assert_closed()


def test_auth_twice_and_auth_disabled(make_broker: Callable[..., Broker], broker: Broker) -> None:
    with raw(broker) as c:
        c.command(b"AUTH", b"s")
        assert c.error() == b"E_AUTH_DISABLED AUTH disabled"
        c.assert_closed()
    authed = make_broker(auth_policy=lambda ip, tls, secret: GRANT)
    with raw(authed) as c:
        c.command(b"AUTH", b"s")
        c.response()
        c.command(b"AUTH", b"s")
        assert c.error() == b"E_INVALID AUTH already set"
        c.assert_closed()


def test_auth_expiry_asks_again(make_broker: Callable[..., Broker]) -> None:
    calls: list[str] = []

    def policy(ip: str, tls: bool, secret: str) -> dict[str, Any]:
        calls.append(secret)
        return {**GRANT, "ttl": 0.05} if len(calls) == 1 else {**GRANT, "authorizations": []}

    broker = make_broker(auth_policy=policy)
    with raw(broker) as c:
        c.command(b"AUTH", b"s")
        c.response()
        c.pub("allowed", b"1")
        import gevent

        gevent.sleep(0.1)
        c.command(b"PUB allowed", b"2")
        assert c.error() == b'E_UNAUTHORIZED AUTH failed for PUB on "allowed" ""'
    assert len(calls) == 2


def test_auth_server_unreachable(make_broker: Callable[..., Broker], tmp_path: Path) -> None:
    broker = make_broker(auth_http_addresses=["127.0.0.1:1"], http_client_timeout=0.5)
    with raw(broker) as c:
        c.command(b"AUTH", b"s")
        assert c.error() == b"E_AUTH_FAILED AUTH failed"
        c.assert_closed()


def _https_get(address: str, context: Any, path: str = "/ping") -> bytes:
    import gevent.socket

    host, port = address.rsplit(":", 1)
    with (
        gevent.socket.create_connection((host, int(port)), timeout=5) as sock,
        context.wrap_socket(sock, server_hostname=host) as tls,
    ):
        tls.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        data = b""
        while chunk := tls.recv(65536):
            data += chunk
    return data


def test_https_listener_serves_the_api_under_the_tls_policy(
    make_broker: Callable[..., Broker], tls_files: Any
) -> None:
    broker = make_broker(
        tls_cert=tls_files.cert_file,
        tls_key=tls_files.key_file,
        tls_root_ca_file=tls_files.ca_file,
        tls_client_auth_policy="require-verify",
        https_address="127.0.0.1:0",
    )
    assert broker.https_port and broker.https_address == f"127.0.0.1:{broker.https_port}"
    with_cert = tls_files.client_context()
    with_cert.load_cert_chain(tls_files.client_cert_file, tls_files.client_key_file)
    answer = _https_get(broker.https_address, with_cert)
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"OK")
    with pytest.raises(OSError):  # ssl.SSLError: the server wants a certificate
        _https_get(broker.https_address, tls_files.client_context())
    broker.stop()
    assert broker.https_port == 0


def test_https_address_without_tls_opens_nothing(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(https_address="127.0.0.1:0")  # nsqd: HTTPS only with a certificate
    assert broker.https_port == 0 and broker.https_address == ""


def test_require_policy_serves_a_client_whose_certificate_it_did_not_verify(
    make_broker: Callable[..., Broker], tls_files: Any, tmp_path: Path
) -> None:
    # 'require' sets OpenSSL's verify callback through ctypes: the context must still
    # read as CERT_REQUIRED and the upgraded connection work both ways.
    other = trustme.CA().issue_cert("stranger@example.com")
    other.cert_chain_pems[0].write_to_path(str(tmp_path / "c.pem"))
    other.private_key_pem.write_to_path(str(tmp_path / "c.key"))
    broker = make_broker(
        tls_cert=tls_files.cert_file, tls_key=tls_files.key_file, tls_client_auth_policy="require"
    )
    assert broker.tls_context is not None
    assert broker.tls_context.verify_mode == ssl.CERT_REQUIRED
    with raw(broker) as c:
        c.negotiate(tls_v1=True)
        context = tls_files.client_context()
        context.load_cert_chain(str(tmp_path / "c.pem"), str(tmp_path / "c.key"))
        c.upgrade_tls(context=context)
        c.pub("up", b"both ways")
        c.sub("up", "ch", rdy=1)
        m = c.message()
        assert m.body == b"both ways"
        c.fin(m.id)
        c.command(b"NOP")
        assert [cl.tls_version for cl in tcp_sessions(broker) if cl.tls] == ["TLSv1.3"]
