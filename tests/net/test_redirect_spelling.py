"""Issue 5, break 1: secret headers never follow a redirect whose host two URL
parsers read differently.

Two loopback servers stand for two hosts: A (the job's URL, spelled
``localhost``) and B (``127.0.0.1`` on another port, another origin). The
fetches opt in to private networks, as a job with ``allow_private_networks``
does, so the only thing between B and A's secrets is the redirect check.

Each refused spelling is one that ``urllib.parse`` and urllib3 (the parser that
makes the connection) read differently, or that a browser and a server may read
differently: a backslash in the authority, userinfo, a percent-encoded host, a
non-ASCII host.
"""

from __future__ import annotations

import pytest

from nexopoll.core.errors import PermanentError
from nexopoll.net import http
from tests.support.httpserver import TestHTTPServer, json_reply, redirect

SECRETS = {"Authorization": "Bearer t-s3cr3t", "X-Api-Key": "k-s3cr3t", "Accept": "text/plain"}


def start(a: TestHTTPServer) -> str:
    return f"http://localhost:{a.port}/r"


def fetch(url: str) -> http.Response:
    return http.fetch("GET", url, headers=SECRETS, secret_headers={"X-Api-Key"}, allow_private=True)


def assert_b_got_no_secret(b: TestHTTPServer) -> None:
    for req in b.requests:
        assert req.header("Authorization") is None
        assert req.header("X-Api-Key") is None


# Locations A answers with; {a} / {b} are the servers' ports. Every one of them was
# followed by the old code; the first two sent A's Authorization header to B.
REFUSED = [
    ("http://127.0.0.1:{b}\\@localhost:{a}/x", "backslash"),  # urlsplit: localhost; urllib3: B
    ("//127.0.0.1:{b}\\@localhost:{a}/x", "backslash"),  # the same, scheme-relative
    ("http://127.0.0.1:{b}\\\\@localhost:{a}/x", "backslash"),
    ("http://localhost:{a}\\.127.0.0.1:{b}/x", "backslash"),
    ("/\\127.0.0.1:{b}/x", "backslash"),  # browsers read it as //127.0.0.1
    ("http://localhost:{a}@127.0.0.1:{b}/x", "userinfo"),
    ("http://user:pw@127.0.0.1:{b}/x", "userinfo"),
    ("http://a@b@127.0.0.1:{b}/x", "userinfo"),
    ("http://%6cocalhost:{a}/x", "percent-encoded"),  # urlsplit: %6cocalhost; urllib3: localhost
    ("http://127.0.0.%31:{b}/x", "percent-encoded"),
    ("http://l\u00f3calhost:{b}/x", "non-ASCII"),  # IDNA: urllib3 would send xn--lcalhost-...
    ("http://local\u00adhost:{a}/x", "non-ASCII"),  # soft hyphen: IDNA maps it away
    ("http://127.0.0.1:{b}\t@localhost:{a}/x", "whitespace or control"),  # urljoin drops \t
    ("http://127.0.0.1:{b}\x85@localhost:{a}/x", "whitespace or control"),  # C1 NEL
]


@pytest.mark.parametrize(("location", "why"), REFUSED)
def test_a_redirect_spelled_to_confuse_the_parsers_is_refused(a, b, location, why) -> None:
    b.route("GET", "/x", json_reply({"stolen": True}))
    a.route("GET", "/x", json_reply({"same": True}))
    a.route("GET", "/r", redirect(location.format(a=a.port, b=b.port)))
    with pytest.raises(http.InvalidURLError, match=why) as info:
        fetch(start(a))
    assert isinstance(info.value, PermanentError)
    assert "redirect target" in str(info.value)
    assert "s3cr3t" not in str(info.value)
    assert b.hits() == 0  # B was never contacted, so it never saw a secret
    assert a.hits("/x") == 0  # nor was the target followed at all


def test_the_backslash_example_would_reach_b_through_urllib3(a, b) -> None:
    """The parser that connects reads B's address out of the backslash spelling."""
    from urllib.parse import urlsplit

    from urllib3.util import parse_url

    location = f"http://127.0.0.1:{b.port}\\@localhost:{a.port}/x"
    assert (urlsplit(location).hostname, urlsplit(location).port) == ("localhost", a.port)
    assert (parse_url(location).host, parse_url(location).port) == ("127.0.0.1", b.port)


def test_a_plain_cross_origin_redirect_is_followed_without_secrets(a, b) -> None:
    b.route("GET", "/x", json_reply({"landed": True}))
    a.route("GET", "/r", redirect(f"http://127.0.0.1:{b.port}/x"))
    resp = fetch(start(a))
    assert resp.status == 200 and b.hits("/x") == 1
    assert_b_got_no_secret(b)
    assert b.requests[0].header("Accept") == "text/plain"
    assert a.requests[0].header("Authorization") == "Bearer t-s3cr3t"


def test_same_origin_in_another_case_keeps_the_secrets(a) -> None:
    a.route("GET", "/x", json_reply({}))
    a.route("GET", "/r", redirect(f"HTTP://LocalHost:{a.port}/x"))
    fetch(start(a))
    assert a.requests[1].header("Authorization") == "Bearer t-s3cr3t"


def test_default_port_spelled_out_is_the_same_origin() -> None:
    from nexopoll.net.urls import origin

    assert origin("http://h.example/") == origin("http://H.example:80/a")
    assert origin("https://h.example/") == origin("https://h.example:443/")
    assert origin("https://h.example/") != origin("http://h.example:443/")


INITIAL_REFUSED = [
    ("http://127.0.0.1:{b}\\@localhost:{a}/r", "backslash"),
    ("http://%6cocalhost:{a}/r", "percent-encoded"),
    ("http://l\u00f3calhost:{a}/r", "non-ASCII"),
    ("http://a@b@localhost:{a}/r", "userinfo"),
    ("http://u\\ser@localhost:{a}/r", "backslash"),
    ("http://localhost:{a}\x7f/r", "control"),
    ("http://localhost:{a}\u2028/r", "whitespace or control"),
]


@pytest.mark.parametrize(("url", "why"), INITIAL_REFUSED)
def test_the_request_url_itself_must_parse_one_way(a, b, url, why) -> None:
    a.route("GET", "/r", json_reply({}))
    b.route("GET", "/r", json_reply({}))
    with pytest.raises(http.InvalidURLError, match=why) as info:
        fetch(url.format(a=a.port, b=b.port))
    assert info.value.args[0].startswith("URL ")
    assert a.hits() == 0 and b.hits() == 0


def test_plain_userinfo_in_the_request_url_is_sent_and_never_forwarded(a, b) -> None:
    b.route("GET", "/x", json_reply({}))
    a.route("GET", "/r", redirect(f"http://127.0.0.1:{b.port}/x"))
    http.fetch("GET", f"http://user:p%40ss@localhost:{a.port}/r", allow_private=True)
    assert a.requests[0].header("Authorization") == "Basic dXNlcjpwQHNz"  # user:p@ss
    assert b.hits("/x") == 1 and b.requests[0].header("Authorization") is None
