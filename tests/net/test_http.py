"""The shared HTTP layer against loopback servers (RELIABILITY rows 29, 30, 33-39).

Loopback fixtures are reached *through* the guard: ``allow_addresses`` exempts
exactly the fixture's ``(127.0.0.1, port)``, so any other loopback port, and any
private address, is still refused. Fake host names come from a
:class:`FakeResolver`; nothing leaves the machine.
"""

from __future__ import annotations

import gzip
import shutil
import ssl
import subprocess
import threading
import time
import zlib
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from nexopoll.core.contract import Cancelled, CancelToken
from nexopoll.core.errors import PermanentError, TransientError
from nexopoll.core.ssrf import BlockedAddress
from nexopoll.net import http
from nexopoll.net.decode import BoundedDecoder
from nexopoll.net.transport import Guard, new_session, shared_session
from tests.support.fakes import ConnectLog, FakeResolver
from tests.support.httpserver import (
    RawReply,
    TestHTTPServer,
    drip,
    gzip_bomb,
    json_reply,
    redirect,
    reply,
    stream_zeros,
)
from tests.support.memory import peak_memory

MiB = 1024 * 1024


@pytest.fixture
def srv():
    with TestHTTPServer() as server:
        yield server


@pytest.fixture
def srv_b():
    with TestHTTPServer() as server:
        yield server


def via(*servers: TestHTTPServer, **kwargs):
    """fetch() keyword arguments that let the guard through to these fixtures only."""
    return {"allow_addresses": [s.address for s in servers], **kwargs}


def test_fetch_returns_status_headers_body_and_final_url(srv) -> None:
    srv.route("GET", "/j", json_reply({"a": 1}, headers={"X-Thing": "yes"}))
    resp = http.fetch("GET", srv.url("/j"), **via(srv))
    assert (resp.status, resp.body, resp.url) == (200, b'{"a": 1}', srv.url("/j"))
    assert resp.headers["x-thing"] == resp.headers["X-THING"] == "yes"
    with pytest.raises(TypeError):
        resp.headers["X-Thing"] = "no"


def test_loopback_is_refused_without_an_exemption(srv) -> None:
    srv.route("GET", "/j", json_reply({}))
    with ConnectLog() as log, pytest.raises(http.BlockedURLError) as info:
        http.fetch("GET", srv.url("/j?token=s3cr3t"))
    assert isinstance(info.value, PermanentError)
    assert isinstance(info.value.__cause__, BlockedAddress)
    assert info.value.reason == "loopback"
    assert "s3cr3t" not in str(info.value)
    assert log.addresses == [] and srv.hits() == 0


def test_allow_private_reaches_loopback_with_the_system_resolver(srv) -> None:
    srv.route("GET", "/j", json_reply([1]))
    assert http.fetch("GET", srv.url("/j"), allow_private=True).body == b"[1]"


@pytest.mark.parametrize("status", [200, 204, 429, 503])
def test_empty_keep_alive_body_returns_at_once(srv, status: int) -> None:
    # Content-Length: 0 on a kept-alive connection: http.client then asks for 0
    # bytes, which must not wait for the server to send (or close) anything.
    srv.route("GET", "/empty", reply(status, b""))
    started = time.monotonic()
    for _ in range(3):
        assert http.fetch("GET", srv.url("/empty"), deadline_secs=10, **via(srv)).body == b""
    assert time.monotonic() - started < 2.0


def test_guarded_and_private_modes_never_share_a_pool() -> None:
    assert shared_session(False) is not shared_session(True)
    assert shared_session(False) is shared_session(False)


@pytest.fixture
def tls_server(tmp_path):
    """An HTTPS server for ``api.example.test`` with a self-signed cert (needs openssl)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=api.example.test"]
        + ["-addext", "subjectAltName=DNS:api.example.test"],
        check=True,
        capture_output=True,
    )
    seen: dict[str, str] = {}
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.sni_callback = lambda sock, name, _: seen.__setitem__("sni", name)
    with TestHTTPServer() as server:
        server.route("GET", "/x", json_reply({"tls": True}))
        server._server.socket = ctx.wrap_socket(server._server.socket, server_side=True)
        yield server, cert, seen


def test_tls_uses_the_host_name_for_sni_and_verification(tls_server) -> None:
    server, cert, seen = tls_server
    resolver = FakeResolver({"api.example.test": ["127.0.0.1"]})
    url = f"https://api.example.test:{server.port}/x"
    with pytest.raises(http.FetchError, match="CERTIFICATE_VERIFY_FAILED"):
        http.fetch("GET", url, resolver=resolver, **via(server))  # system trust store
    assert seen["sni"] == "api.example.test"
    guard = Guard(resolver=resolver, allow_addresses=frozenset({server.address}))
    with new_session(guard) as session:
        session.verify = str(cert)  # trust the test CA: the name must match the cert
        assert session.get(url, timeout=5).json() == {"tls": True}
    assert server.requests[-1].header("Host") == f"api.example.test:{server.port}"


# --- row 29: huge bodies ------------------------------------------------------------


@pytest.mark.parametrize("content_length", [True, False])
def test_50_mb_body_is_rejected_at_the_cap(srv, content_length: bool) -> None:
    srv.route("GET", "/big", stream_zeros(50 * MiB, content_length=content_length))
    with peak_memory() as peak:
        with pytest.raises(http.ResponseTooLargeError, match="too large"):
            http.fetch("GET", srv.url("/big"), **via(srv))
    assert peak[0] < 2 * http.DEFAULT_MAX_BYTES


def chunked(parts: list[bytes], repeat: int = 1):
    """A writer sending ``parts`` (``repeat`` times) with Transfer-Encoding: chunked."""

    def writer(raw: RawReply) -> None:
        if not raw.head(200, {"Transfer-Encoding": "chunked"}):
            return
        for _ in range(repeat):
            for part in parts:
                if not raw.write(b"%x\r\n%s\r\n" % (len(part), part)):
                    return
        raw.write(b"0\r\n\r\n")

    return lambda req: writer


def test_chunked_bodies_are_read_and_capped(srv) -> None:
    srv.route("GET", "/small", chunked([b'{"a":', b" 1}"]))
    srv.route("GET", "/huge", chunked([bytes(64 * 1024)], repeat=800))  # 50 MiB
    assert http.fetch("GET", srv.url("/small"), **via(srv)).body == b'{"a": 1}'
    with pytest.raises(http.ResponseTooLargeError):
        http.fetch("GET", srv.url("/huge"), **via(srv))


def test_body_just_under_the_cap_is_accepted(srv) -> None:
    srv.route("GET", "/ok", stream_zeros(1024, content_length=False))
    assert len(http.fetch("GET", srv.url("/ok"), max_bytes=1024, **via(srv)).body) == 1024


# --- row 30: gzip bomb and decoding -------------------------------------------------


def test_gzip_bomb_is_rejected_by_the_decoded_byte_cap(srv) -> None:
    srv.route("GET", "/bomb", gzip_bomb(300 * MiB))
    with peak_memory() as peak:
        started = time.monotonic()
        with pytest.raises(http.ResponseTooLargeError, match="decoded"):
            http.fetch("GET", srv.url("/bomb"), **via(srv))
    assert peak[0] < 2 * http.DEFAULT_MAX_BYTES
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda b: zlib.compress(b)[2:-4]),  # raw deflate, as some servers send
        ("gzip", lambda b: gzip.compress(b[:5]) + gzip.compress(b[5:])),  # two members
    ],
)
def test_compressed_bodies_are_decoded(srv, encoding, compress) -> None:
    doc = b'{"items": [1, 2, 3]}' * 50
    srv.route("GET", "/c", reply(200, compress(doc), {"Content-Encoding": encoding}))
    resp = http.fetch("GET", srv.url("/c"), **via(srv))
    assert resp.body == doc
    assert srv.requests[0].header("Accept-Encoding") == "gzip, deflate"


def test_decoder_rejects_corrupt_and_unknown_encodings() -> None:
    with pytest.raises(BoundedDecoder.Invalid):
        list(BoundedDecoder("gzip", 100).feed(b"definitely not gzip"))
    with pytest.raises(BoundedDecoder.Invalid):
        BoundedDecoder("br", 100)
    stacked = BoundedDecoder("deflate, gzip", 1000)
    pieces = [*stacked.feed(gzip.compress(zlib.compress(b"hi"))), *stacked.flush()]
    assert b"".join(pieces) == b"hi"
    with pytest.raises(BoundedDecoder.TooLarge):
        list(BoundedDecoder("gzip", 1000).feed(gzip.compress(bytes(1001))))


# --- row 33: slow-loris, stalls, cancel ---------------------------------------------


def test_slow_loris_body_raises_at_the_deadline(srv) -> None:
    srv.route("GET", "/drip", drip(b"x" * 1000, interval=0.3))
    started = time.monotonic()
    with pytest.raises(http.DeadlineExceededError) as info:
        http.fetch("GET", srv.url("/drip"), deadline_secs=1.5, **via(srv))
    elapsed = time.monotonic() - started
    assert isinstance(info.value, TransientError)
    assert 1.4 <= elapsed < 3.0


def test_slow_loris_headers_raise_at_the_deadline(srv) -> None:
    def header_drip(raw: RawReply) -> None:
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:
            if not raw.sleep(0.2) or not raw.write(bytes([byte])):
                return

    srv.route("GET", "/h", lambda req: header_drip)
    started = time.monotonic()
    with pytest.raises(http.DeadlineExceededError):
        http.fetch("GET", srv.url("/h"), deadline_secs=1.5, **via(srv))
    assert time.monotonic() - started < 3.0


def test_silent_server_raises_at_the_deadline(srv) -> None:
    srv.route("GET", "/mute", lambda req: lambda raw: raw.sleep(30))
    started = time.monotonic()
    with pytest.raises(http.DeadlineExceededError):
        http.fetch("GET", srv.url("/mute"), deadline_secs=1.0, **via(srv))
    assert time.monotonic() - started < 2.5


def test_cancel_token_stops_a_read_promptly(srv) -> None:
    srv.route("GET", "/drip", drip(b"x" * 1000, interval=0.3))
    token = CancelToken()
    threading.Timer(0.5, token.cancel, args=("shutdown",)).start()
    started = time.monotonic()
    with pytest.raises(Cancelled, match="shutdown"):
        http.fetch("GET", srv.url("/drip"), deadline_secs=20, cancel=token, **via(srv))
    assert time.monotonic() - started < 2.0


def test_connection_refused_is_transient(srv) -> None:
    port = srv.port
    srv.stop()
    with pytest.raises(http.FetchError) as info:
        http.fetch("GET", f"http://127.0.0.1:{port}/", allow_addresses=[("127.0.0.1", port)])
    assert "refused" in str(info.value).lower()


# --- row 34: redirects to forbidden places ------------------------------------------


def test_redirect_to_another_loopback_port_is_refused(srv, srv_b) -> None:
    srv_b.route("GET", "/internal", json_reply({"admin": True}))
    srv.route("GET", "/r", redirect(srv_b.url("/internal")))
    with ConnectLog() as log, pytest.raises(http.BlockedURLError):
        http.fetch("GET", srv.url("/r"), **via(srv))
    assert srv_b.hits() == 0
    assert log.addresses == [srv.address]


def test_redirect_to_metadata_is_refused_before_connecting(srv) -> None:
    srv.route("GET", "/r", redirect("http://169.254.169.254/latest/meta-data/"))
    with ConnectLog() as log, pytest.raises(http.BlockedURLError) as info:
        http.fetch("GET", srv.url("/r"), **via(srv))
    assert info.value.reason == "metadata"
    assert log.addresses == [srv.address]


@pytest.mark.parametrize(
    "target", ["file:///etc/passwd", "gopher://127.0.0.1:70/", "feed://example.com/rss", "ftp://x/"]
)
def test_redirect_to_a_non_http_scheme_is_refused(srv, target: str) -> None:
    srv.route("GET", "/r", redirect(target))
    with pytest.raises(http.InvalidURLError, match="scheme"):
        http.fetch("GET", srv.url("/r"), **via(srv))


@pytest.mark.parametrize("url", ["file:///etc/passwd", "feed://example.com/", "/etc/passwd"])
def test_non_http_urls_are_refused_up_front(url: str) -> None:
    with pytest.raises(http.InvalidURLError):
        http.fetch("GET", url)


def test_redirect_limit(srv) -> None:
    srv.route("GET", "/loop", redirect("/loop"))
    with pytest.raises(http.TooManyRedirectsError):
        http.fetch("GET", srv.url("/loop"), **via(srv))
    assert srv.hits("/loop") == 4  # the first request and three followed redirects


def test_max_redirects_zero_returns_the_redirect_unfollowed(srv, srv_b) -> None:
    srv.route("POST", "/hook", redirect(srv_b.url("/x"), status=307))
    resp = http.fetch("POST", srv.url("/hook"), body=b"{}", max_redirects=0, **via(srv, srv_b))
    assert resp.status == 307 and srv_b.hits() == 0


@pytest.mark.parametrize(
    ("status", "method", "has_body"),
    [(303, "GET", False), (302, "GET", False), (307, "POST", True)],
)
def test_redirect_method_rules(srv, status: int, method: str, has_body: bool) -> None:
    srv.route("POST", "/start", redirect("/end", status=status))
    srv.route("*", "/end", json_reply({}))
    http.fetch("POST", srv.url("/start"), json={"q": 1}, **via(srv))
    end = srv.requests[-1]
    assert (end.method, end.body == b'{"q":1}') == (method, has_body)


# --- rows 35-37: resolution -----------------------------------------------------------


@pytest.mark.parametrize(
    "ip", ["10.0.0.1", "fd00:ec2::254", "64:ff9b::a00:1", "2002:a00:1::", "::ffff:10.0.0.1"]
)
def test_names_resolving_to_private_addresses_are_blocked_without_connecting(ip: str) -> None:
    resolver = FakeResolver({"intranet.example.test": [ip]})
    with ConnectLog() as log, pytest.raises(http.BlockedURLError) as info:
        http.fetch("GET", "http://intranet.example.test/", resolver=resolver)
    assert info.value.ip == ip
    assert log.addresses == []


def test_every_resolved_address_must_pass(srv) -> None:
    resolver = FakeResolver({"mixed.example.test": ["127.0.0.1", "10.0.0.1"]})
    with ConnectLog() as log, pytest.raises(http.BlockedURLError):
        http.fetch("GET", srv.url("/", host="mixed.example.test"), resolver=resolver, **via(srv))
    assert log.addresses == []


def test_dns_rebinding_cannot_win_one_resolution_per_connection(srv) -> None:
    srv.route("GET", "/a", redirect("/b"))
    srv.route("GET", "/b", json_reply({"ok": True}))
    resolver = FakeResolver({"rebind.example.test": [["127.0.0.1"], ["10.0.0.1"]]})
    with ConnectLog() as log:
        resp = http.fetch(
            "GET", srv.url("/a", host="rebind.example.test"), resolver=resolver, **via(srv)
        )
    assert resp.status == 200
    assert resolver.calls == ["rebind.example.test"]
    assert log.addresses == [srv.address]  # connected to exactly the checked address
    assert srv.requests[0].header("Host") == f"rebind.example.test:{srv.port}"


@pytest.mark.parametrize("host", ["2130706433", "0x7f000001", "0177.0.0.1", "127.1", "0"])
def test_odd_ipv4_spellings_are_blocked(srv, host: str) -> None:
    with ConnectLog() as log, pytest.raises(http.BlockedURLError):
        http.fetch("GET", f"http://{host}:{srv.port}/")
    assert log.addresses == [] and srv.hits() == 0


# --- row 38: proxy environment ignored ----------------------------------------------


def test_proxy_environment_is_ignored(srv, monkeypatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    srv.route("GET", "/j", json_reply({"direct": True}))
    with ConnectLog() as log:
        resp = http.fetch("GET", srv.url("/j"), **via(srv))
    assert resp.status == 200
    assert srv.requests[0].target == "/j"  # origin-form: not sent through a proxy
    assert log.addresses == [srv.address]


# --- row 39: credentials across redirects -------------------------------------------

SECRET_HEADERS = {
    "X-Api-Key": "k-s3cr3t",
    "Authorization": "Bearer t-s3cr3t",
    "Cookie": "session=c-s3cr3t",
    "Accept": "application/json",
}


def test_cross_host_redirect_drops_secret_headers(srv, srv_b) -> None:
    resolver = FakeResolver({"a.example.test": ["127.0.0.1"], "b.example.test": ["127.0.0.1"]})
    srv_b.route("GET", "/landing", json_reply({}))
    srv.route("GET", "/r", redirect(srv_b.url("/landing", host="b.example.test")))
    http.fetch(
        "GET",
        srv.url("/r", host="a.example.test"),
        headers=SECRET_HEADERS,
        secret_headers={"x-api-key"},
        resolver=resolver,
        **via(srv, srv_b),
    )
    first, landed = srv.requests[0], srv_b.requests[0]
    assert first.header("X-Api-Key") == "k-s3cr3t" and first.header("Cookie")
    assert landed.header("X-Api-Key") is None
    assert landed.header("Authorization") is None
    assert landed.header("Cookie") is None
    assert landed.header("Accept") == "application/json"


def test_same_origin_redirect_keeps_headers(srv) -> None:
    srv.route("GET", "/r", redirect("/final"))
    srv.route("GET", "/final", json_reply({}))
    http.fetch(
        "GET", srv.url("/r"), headers=SECRET_HEADERS, secret_headers={"X-Api-Key"}, **via(srv)
    )
    assert srv.requests[1].header("X-Api-Key") == "k-s3cr3t"


def test_error_messages_never_contain_header_values(srv) -> None:
    srv.route("GET", "/r", redirect("http://169.254.169.254/?x=1"))
    with pytest.raises(http.BlockedURLError) as info:
        http.fetch("GET", srv.url("/r"), headers=SECRET_HEADERS, **via(srv))
    assert "s3cr3t" not in str(info.value)
    with pytest.raises(http.InvalidURLError) as bad:
        http.fetch("GET", srv.url("/r"), headers={"X-Api-Key": "s3cr3t\r\nX: y"}, **via(srv))
    assert "s3cr3t" not in str(bad.value)


# --- status classification ----------------------------------------------------------

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("status", [200, 201, 204, 304])
def test_success_statuses_pass(status: int) -> None:
    http.classify_status(status, {})


@pytest.mark.parametrize("status", [401, 403, 404, 410, 400, 422, 300, 302])
def test_permanent_statuses(status: int) -> None:
    with pytest.raises(http.PermanentHTTPError) as info:
        http.classify_status(status, {})
    assert info.value.status == status and isinstance(info.value, PermanentError)


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_transient_statuses(status: int) -> None:
    with pytest.raises(http.TransientHTTPError) as info:
        http.classify_status(status, {})
    assert info.value.status == status and isinstance(info.value, TransientError)


@pytest.mark.parametrize(
    ("status", "value", "expected"),
    [
        (429, "120", timedelta(seconds=120)),
        (503, "86400", timedelta(hours=1)),  # capped
        (408, format_datetime(NOW + timedelta(seconds=30), usegmt=True), timedelta(seconds=30)),
        (429, format_datetime(NOW - timedelta(seconds=30), usegmt=True), timedelta(0)),
        (429, "soon", None),
        (500, "120", None),  # only 408/429/503 honour Retry-After
    ],
)
def test_retry_after(status: int, value: str, expected: timedelta | None) -> None:
    with pytest.raises(http.TransientHTTPError) as info:
        http.classify_status(status, {"retry-after": value}, now=NOW)
    assert info.value.retry_after == expected
