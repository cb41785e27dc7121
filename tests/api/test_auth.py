"""Who may call the API (RELIABILITY rows 47, 48, 49) and the rate limit."""

from __future__ import annotations

import pytest
from django.test import Client

from nexopoll.models import PollState

from .conftest import TOKEN, Api, staff
from .test_pollers_api import error

UNSAFE = [
    ("/api/pollers/alpha/pause", None),
    ("/api/pollers/alpha/run", None),
    ("/api/pollers/alpha/reset", {"confirm": True}),
    ("/api/pollers/reload", {"dry_run": False}),
]


def snapshot() -> list[tuple]:
    fields = ("job_id", "paused", "epoch", "ticks_total", "cursor")
    return list(PollState.objects.order_by("job_id").values_list(*fields))


@pytest.mark.parametrize(
    "headers,query",
    [
        ({}, ""),  # no header
        ({"HTTP_AUTHORIZATION": "Bearer wrong-token"}, ""),
        ({"HTTP_AUTHORIZATION": f"Bearer {TOKEN}x"}, ""),
        ({"HTTP_AUTHORIZATION": f"Basic {TOKEN}"}, ""),
        ({"HTTP_AUTHORIZATION": "Bearer "}, ""),
        ({}, f"?token={TOKEN}"),  # a token in the URL is never read
        ({}, f"?access_token={TOKEN}"),
    ],
)
def test_row_47_no_wrong_or_query_token_is_401_and_changes_nothing(jobs, settings, headers, query):
    settings.NEXOPOLL_API_TOKEN = TOKEN
    before = snapshot()
    c = Client()
    for url, body in UNSAFE:
        r = c.post(url + query, data=body or {}, content_type="application/json", **headers)
        error(r, 401, "unauthorized")
        assert r["WWW-Authenticate"].startswith("Bearer")
    error(c.get("/api/pollers" + query, **headers), 401)
    assert snapshot() == before


def test_no_token_configured_refuses_every_bearer(jobs, settings):
    settings.NEXOPOLL_API_TOKEN = ""
    before = snapshot()
    for token in ("anything", TOKEN, "''"):
        r = Client().get("/api/pollers", HTTP_AUTHORIZATION=f"Bearer {token}")
        assert "NEXOPOLL_API_TOKEN is not set" in error(r, 401)
    r = Api(Client(), "x").post("/api/pollers/alpha/pause")
    error(r, 401)
    assert snapshot() == before


def login(user) -> Client:
    c = Client(enforce_csrf_checks=True)
    c.force_login(user)
    return c


def csrf_cookie(c: Client) -> str:
    """The csrftoken cookie a browser got from the admin, and the same secret for the header."""
    from django.middleware.csrf import _get_new_csrf_string

    secret = _get_new_csrf_string()
    c.cookies["csrftoken"] = secret
    return secret


def test_row_48_session_post_without_csrf_is_403(jobs):
    c = login(staff("op", "admin_ext.view_job", "admin_ext.operate_job"))
    before = snapshot()
    for url, body in UNSAFE:
        r = c.post(url, data=body or {}, content_type="application/json")
        error(r, 403, "csrf_failed")
        r = c.post(url, data="confirm=true", content_type="text/plain")
        error(r, 403, "csrf_failed")
    csrf_cookie(c)  # the cookie alone (a cross-site form sends it) is not enough
    for url, body in UNSAFE:
        error(c.post(url, data=body or {}, content_type="application/json"), 403, "csrf_failed")
        r = c.post(url, data=body or {}, content_type="application/json", HTTP_X_CSRFTOKEN="x" * 32)
        error(r, 403, "csrf_failed")
    assert snapshot() == before
    assert c.get("/api/pollers").status_code == 200  # reads need no CSRF token


def test_session_with_csrf_and_the_operate_permission_acts(jobs):
    c = login(staff("op", "admin_ext.view_job", "admin_ext.operate_job"))
    token = csrf_cookie(c)
    r = c.post("/api/pollers/alpha/pause", content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert r.status_code == 200 and PollState.objects.get(job_id="alpha").paused
    # applying a reload needs its own permission
    r = c.post(
        "/api/pollers/reload",
        data={"dry_run": False},
        content_type="application/json",
        HTTP_X_CSRFTOKEN=token,
    )
    assert "reload_config" in error(r, 403)


def test_session_permissions(jobs):
    viewer = login(staff("viewer", "admin_ext.view_job"))
    assert viewer.get("/api/pollers").status_code == 200
    token = csrf_cookie(viewer)
    r = viewer.post("/api/pollers/alpha/pause", HTTP_X_CSRFTOKEN=token)
    assert "operate_job" in error(r, 403)
    assert not PollState.objects.get(job_id="alpha").paused
    error(viewer.get("/api/deliveries"), 403)
    nobody = login(staff("nobody"))
    error(nobody.get("/api/pollers"), 403)
    from django.contrib.auth.models import User

    plain = User.objects.create_user("plain", password="x")  # not staff
    error(login(plain).get("/api/pollers"), 403)


def test_row_49_host_header_of_another_site_is_400(jobs, settings):
    settings.NEXOPOLL_API_TOKEN = TOKEN
    c = Client()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}
    assert c.get("/api/pollers", HTTP_HOST="attacker.example", **auth).status_code == 400
    r = c.post("/api/pollers/alpha/pause", HTTP_HOST="attacker.example", **auth)
    assert r.status_code == 400
    assert not PollState.objects.get(job_id="alpha").paused
    assert c.get("/api/pollers", HTTP_HOST="localhost", **auth).status_code == 200


def test_rate_limit_per_client(api, jobs, settings):
    settings.NEXOPOLL_API_RATE_PER_MIN = 3
    for _ in range(3):
        assert api.get("/api/pollers").status_code == 200
    r = api.get("/api/pollers")
    error(r, 429, "rate_limited")
    assert 0 < int(r["Retry-After"]) <= 60
    # another client (a staff session) has its own budget
    assert login(staff("v", "admin_ext.view_job")).get("/api/pollers").status_code == 200
    # failed logins are counted against the address, and stopped too
    c = Client()
    codes = [c.get("/api/pollers", HTTP_AUTHORIZATION="Bearer guess").status_code for _ in range(5)]
    assert codes[:3] == [401, 401, 401] and codes[-1] == 429
