"""Issue 5, item 10b: a response whose headers are malformed is the server's
passing fault, so the fetch error is transient (retried, counted by the breaker),
never permanent (which would pause the job at once).

The server is a raw socket on loopback: http.server cannot send two
Content-Length headers that disagree.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nexopoll.core.errors import TransientError
from nexopoll.net import http
from tests.support.rawserver import RawServer


@pytest.fixture
def raw_server() -> Iterator[type[RawServer]]:
    servers: list[RawServer] = []

    def make(raw: bytes) -> RawServer:
        servers.append(RawServer(raw))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


CONFLICTING = {
    "two headers": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nhello!!",
    "one list": b"HTTP/1.1 200 OK\r\nContent-Length: 5, 7\r\n\r\nhello!!",
    "three headers": (
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n"
        b"Content-Length: 6\r\n\r\nhello!"
    ),
    "on an error status": b"HTTP/1.1 500 X\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    "on a redirect": (
        b"HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"
    ),
}


@pytest.mark.parametrize("raw", CONFLICTING.values(), ids=CONFLICTING.keys())
def test_conflicting_content_length_is_transient(raw_server, raw: bytes) -> None:
    server = raw_server(raw)
    with pytest.raises(TransientError) as info:
        http.fetch("GET", server.url + "?token=q-s3cr3t", allow_private=True)
    assert isinstance(info.value, http.FetchError)
    assert "Content-Length" in str(info.value)
    assert "s3cr3t" not in str(info.value)
    assert len(server.requests) == 1


def test_conflicting_content_length_is_transient_for_a_post(raw_server) -> None:
    server = raw_server(CONFLICTING["two headers"])
    with pytest.raises(http.FetchError, match="malformed response"):
        http.fetch("POST", server.url, body=b"{}", allow_private=True)


def test_repeated_equal_content_length_is_accepted(raw_server) -> None:
    server = raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello")
    resp = http.fetch("GET", server.url, allow_private=True)
    assert (resp.status, resp.body) == (200, b"hello")


def test_a_body_shorter_than_its_content_length_is_transient(raw_server) -> None:
    server = raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello")
    with pytest.raises(http.FetchError):
        http.fetch("GET", server.url, allow_private=True)


def test_a_bad_request_header_is_still_permanent() -> None:
    with pytest.raises(http.InvalidURLError, match="invalid request header") as info:
        http.fetch("GET", "http://127.0.0.1:9/", headers={"X-Key": "s3cr3t\r\nX: y"})
    assert "s3cr3t" not in str(info.value)
