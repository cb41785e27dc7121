"""Issue 5, break 3: a request other than GET/HEAD never follows a redirect to
another origin, whatever the status; within its origin a 307/308 is followed
with the body sent again.

A (``localhost``) and B (``127.0.0.1``, another port) are two loopback servers,
reached as a job with ``allow_private_networks`` reaches them.
"""

from __future__ import annotations

import pytest

from nexopoll.core.errors import PermanentError
from nexopoll.net import http
from tests.support.httpserver import json_reply, redirect

BODY = b'{"token":"b0dy-s3cr3t"}'


def send(method: str, url: str, **kwargs) -> http.Response:
    return http.fetch(method, url, body=BODY, allow_private=True, **kwargs)


@pytest.mark.parametrize("status", [307, 308, 301, 302, 303])
@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_a_request_with_a_body_never_leaves_its_origin(a, b, method, status) -> None:
    b.route("*", "/x", json_reply({"got": "it"}))
    a.route(method, "/hook", redirect(f"http://127.0.0.1:{b.port}/x", status=status))
    with pytest.raises(http.RedirectRefusedError) as info:
        send(method, f"http://localhost:{a.port}/hook")
    assert isinstance(info.value, PermanentError)
    text = str(info.value)
    assert f"{status} redirect of a {method} request with a body to another origin" in text
    assert "refused" in text and "s3cr3t" not in text
    assert b.hits() == 0


@pytest.mark.parametrize(
    "location",
    [
        "https://localhost:{a}/x",  # another scheme is another origin
        "http://localhost:{b}/x",  # another port
        "http://127.0.0.1:{a}/x",  # another spelling of the host
    ],
)
def test_every_origin_change_counts(a, b, location) -> None:
    b.route("*", "/x", json_reply({}))
    a.route("*", "/x", json_reply({}))
    a.route("POST", "/hook", redirect(location.format(a=a.port, b=b.port), status=308))
    with pytest.raises(http.RedirectRefusedError, match="another origin"):
        send("POST", f"http://localhost:{a.port}/hook")
    assert b.hits() == 0 and a.hits("/x") == 0


def test_a_chain_that_leaves_the_origin_later_is_refused_there(a, b) -> None:
    b.route("*", "/x", json_reply({}))
    a.route("POST", "/one", redirect("/two", status=307))
    a.route("POST", "/two", redirect(f"http://127.0.0.1:{b.port}/x", status=308))
    with pytest.raises(http.RedirectRefusedError, match="308 redirect of a POST"):
        send("POST", f"http://localhost:{a.port}/one")
    assert a.requests[1].body == BODY  # the same-origin hop was followed
    assert b.hits() == 0


@pytest.mark.parametrize("status", [307, 308])
@pytest.mark.parametrize("method", ["POST", "PUT"])
def test_same_origin_307_308_resend_the_body(a, method, status) -> None:
    a.route(method, "/hook", redirect("/v2/hook", status=status))
    a.route(method, "/v2/hook", json_reply({"ok": True}))
    resp = send(method, f"http://localhost:{a.port}/hook", headers={"Authorization": "Bearer t"})
    assert resp.status == 200
    final = a.requests[-1]
    assert (final.method, final.path, final.body) == (method, "/v2/hook", BODY)
    assert final.header("Authorization") == "Bearer t"


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_get_and_head_still_follow_to_another_origin(a, b, method) -> None:
    b.route(method, "/x", json_reply({}))
    a.route(method, "/r", redirect(f"http://127.0.0.1:{b.port}/x", status=307))
    resp = http.fetch(method, f"http://localhost:{a.port}/r", allow_private=True)
    assert resp.status == 200 and b.hits("/x") == 1


def test_max_redirects_zero_still_returns_the_redirect(a, b) -> None:
    a.route("POST", "/hook", redirect(f"http://127.0.0.1:{b.port}/x", status=307))
    resp = send("POST", f"http://localhost:{a.port}/hook", max_redirects=0)
    assert resp.status == 307 and b.hits() == 0


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_get_with_a_body_never_leaves_its_origin_either(a, b, status) -> None:
    b.route("GET", "/x", json_reply({}))
    a.route("GET", "/q", redirect(f"http://127.0.0.1:{b.port}/x", status=status))
    with pytest.raises(http.RedirectRefusedError, match="GET request with a body"):
        send("GET", f"http://localhost:{a.port}/q")
    assert b.hits() == 0


def test_after_a_303_the_get_without_a_body_may_leave_the_origin(a, b) -> None:
    """303 turns the POST into a bodiless GET: from then on it is an ordinary GET."""
    b.route("GET", "/done", json_reply({"ok": True}))
    a.route("POST", "/form", redirect("/result", status=303))
    a.route("GET", "/result", redirect(f"http://127.0.0.1:{b.port}/done", status=302))
    resp = send("POST", f"http://localhost:{a.port}/form", headers={"Authorization": "Bearer t"})
    assert resp.status == 200 and b.hits("/done") == 1
    assert b.requests[0].body == b"" and b.requests[0].header("Authorization") is None


def test_a_bodiless_delete_is_refused_too(a, b) -> None:
    b.route("DELETE", "/x", json_reply({}))
    a.route("DELETE", "/item", redirect(f"http://127.0.0.1:{b.port}/x", status=307))
    with pytest.raises(http.RedirectRefusedError, match="307 redirect of a DELETE request to"):
        http.fetch("DELETE", f"http://localhost:{a.port}/item", allow_private=True)
    assert b.hits() == 0
