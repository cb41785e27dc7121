"""Every answer under /api/ is JSON: malformed paths, NUL and invalid unicode in path,
query and body, huge and deeply nested bodies, wrong Content-Types, bad pagination and
wrong methods get a 4xx ``{"error": {code, message}}``, never a 500 or an HTML page
(run on SQLite and on PostgreSQL, which refuses NUL characters)."""

from __future__ import annotations

import pytest
from django.test import Client

from nexopoll.models import PollState

from .conftest import TOKEN, staff

AUTH = {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}
UUID = "0b6e2a52-3c0a-4c6e-9d57-1f8e2f6f6c11"


def api_error(response, *statuses: int) -> dict:
    assert response["Content-Type"].startswith("application/json"), (
        response.status_code,
        response["Content-Type"],
        response.content[:300],
    )
    assert response.status_code in statuses, (response.status_code, response.content[:300])
    body = response.json()
    assert set(body) == {"error"} and {"code", "message"} <= set(body["error"]), body
    assert isinstance(body["error"]["message"], str) and body["error"]["code"]
    return body["error"]


@pytest.fixture
def client(api, jobs) -> Client:
    return Client()


def snapshot() -> list[tuple]:
    return list(PollState.objects.order_by("job_id").values_list("job_id", "epoch", "paused"))


@pytest.mark.parametrize(
    "path",
    [
        "/api",
        "/api/",
        "/api/pollers/",
        "/api/nothing",
        "/api/x%0Ay",
        "/api/%0A",
        "/api/pollers/alpha/run/extra",
        "/api/pollers/%00",
        "/api/pollers/al%00pha",
        "/api/pollers/%ff%fe",
        "/api/pollers/%ED%A0%80",
        "/api/pollers/alpha%0A/pause",
        "/api/pollers/" + "a" * 5000,
        "/api/deliveries/%00/redeliver",
        f"/api/pollers/alpha/runs/{UUID}%00",
        "/api/pollers/alpha/runs/%00",
        "/api/pollers/alpha/runs/" + "f" * 400,
        "/api/openapi.json/x",
        "/api//pollers",
        "/api/pollers/..%2F..%2Fadmin",
        "/api/pollers/%2e%2e",
    ],
)
def test_malformed_paths_are_json_4xx(client, path):
    before = snapshot()
    for method in ("get", "post"):
        r = getattr(client, method)(path, **AUTH)
        api_error(r, 400, 404, 405)
    assert snapshot() == before


QUERIES = [
    "kind=%00",
    "agent=a%00b",
    "after=%00",
    "status=%00",
    "paused=%00",
    "limit=%00",
    "%00=1",
    "kind=%ED%A0%80",
    "kind=%ff",
    "after=al%00pha",
    "limit=-1",
    "limit=0",
    "limit=501",
    "limit=99999999999999999999999",
    "limit=2.0",
    "limit=1e3",
    "limit=abc",
    "limit=",
    "limit=%205",
    "limit=%2B5",
    "limit=%EF%BC%95",
    "limit=5_0",
    "limit=0x10",
    "limit=NaN",
    "paused=1",
    "paused=yes",
    "paused=",
    "limit=1&limit=2",
    "colour=red",
    "kind=" + "k" * 100,
]


@pytest.mark.parametrize("query", QUERIES)
def test_bad_job_list_queries_are_json_400(client, query):
    api_error(client.get(f"/api/pollers?{query}", **AUTH), 400)


@pytest.mark.parametrize(
    "query",
    [
        "job_id=%00",
        "job_id=a%00",
        "after=%00",
        f"after={UUID}%00",
        "after=nope",
        "status=%00",
        "limit=-5",
        "limit=2.5",
        "limit=%00",
        "limit=" + "9" * 50,
    ],
)
def test_bad_delivery_queries_are_json_400(client, query):
    api_error(client.get(f"/api/deliveries?{query}", **AUTH), 400)


def test_good_queries_still_work(client):
    assert client.get("/api/pollers?limit=2&paused=false&kind=scripted", **AUTH).status_code == 200
    assert client.get("/api/deliveries?limit=500&job_id=alpha", **AUTH).status_code == 200
    assert client.get("/api/pollers?kind=%C3%A9t%C3%A9", **AUTH).json()["total"] == 0


def post(client: Client, path: str, data, content_type="application/json", **extra):
    return client.generic("POST", path, data, content_type=content_type, **{**AUTH, **extra})


@pytest.mark.parametrize(
    "data",
    [
        b"[" * 30_000 + b"]" * 30_000,
        b'{"confirm": ' + b"[" * 30_000 + b"]" * 30_000 + b"}",
        b'{"a":' * 10_000 + b"1" + b"}" * 10_000,
        b"[" * 900 + b"]" * 900,
        b'{"confirm": "\\u0000"}',
        b'{"\\u0000": true}',
        b'{"confirm": "\\ud800"}',
        b'{"confirm": true, "x\\u0000": 1}',
        b"\xff\xfe{}",
        b'{"confirm": tru',
        b'{"confirm": NaN}',
        b'{"confirm": Infinity}',
        b"\x00",
        b'"\x00"',
        b"null",
        b"[]",
        b"1",
        b'"confirm"',
        b'{"confirm": 1}',
        b'{"confirm": "true"}',
        b'{"confirm": 1.0}',
        b'{"confirm": true, "confirm2": true}',
    ],
)
def test_bad_json_bodies_are_json_4xx_and_change_nothing(client, data):
    before = snapshot()
    api_error(post(client, "/api/pollers/alpha/reset", data), 400, 422)
    api_error(post(client, "/api/pollers/reload", data.replace(b"confirm", b"dry_run")), 400, 422)
    assert snapshot() == before


@pytest.mark.parametrize(
    "body",
    [
        {"wait": 1},
        {"wait": "false"},
        {"force": 1},
        {"force": "true"},
        {"force": None},
        {"wait": 0},
        {"force": 1.0},
        {"wait": []},
    ],
)
def test_run_flags_are_only_json_booleans(client, body):
    import json

    before = snapshot()
    api_error(post(client, "/api/pollers/alpha/run", json.dumps(body)), 422)
    for path, key in [
        ("/api/pollers/reload", "dry_run"),
        (f"/api/deliveries/{UUID}/redeliver", "force"),
    ]:
        api_error(post(client, path, json.dumps({key: next(iter(body.values()))})), 422)
    assert snapshot() == before


@pytest.mark.parametrize("size", [64 * 1024 + 1, 3 * 1024 * 1024])
def test_large_bodies_are_413(client, size):
    data = b'{"confirm": true, "pad": "' + b"x" * size + b'"}'
    assert api_error(post(client, "/api/pollers/alpha/reset", data), 413)["code"] == "too_large"
    assert api_error(post(client, "/api/pollers/alpha/pause", data), 413)
    assert PollState.objects.get(job_id="alpha").epoch == 0


def test_a_3mb_form_body_with_a_session_is_413_json(client):
    """A session's unsafe request goes through Django's CSRF check, which reads a form
    body: past DATA_UPLOAD_MAX_MEMORY_SIZE Django raises RequestDataTooBig (was HTML 400)."""
    user = staff("op", "admin_ext.operate_job", "admin_ext.view_job")
    c = Client(enforce_csrf_checks=True)
    c.force_login(user)
    c.cookies["csrftoken"] = "a" * 32  # a cookie, so the check goes on to read the form
    data = b"confirm=true&pad=" + b"x" * (3 * 1024 * 1024)
    r = c.generic(
        "POST", "/api/pollers/alpha/reset", data, content_type="application/x-www-form-urlencoded"
    )
    api_error(r, 413)
    assert PollState.objects.get(job_id="alpha").epoch == 0


@pytest.mark.parametrize(
    "ctype",
    [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/xml",
        "",
        "application/jsonx",
        "application/json-seq",
    ],
)
def test_non_json_content_types_are_json_4xx(client, ctype):
    r = post(client, "/api/pollers/alpha/reset", b'{"confirm": true}', content_type=ctype)
    api_error(r, 400, 415)
    assert PollState.objects.get(job_id="alpha").epoch == 0


@pytest.mark.parametrize(
    "method,path",
    [
        ("PUT", "/api/pollers"),
        ("DELETE", "/api/pollers/alpha"),
        ("PATCH", "/api/pollers/alpha"),
        ("GET", "/api/pollers/alpha/reset"),
        ("POST", "/api/pollers"),
        ("PUT", "/api/deliveries"),
        ("GET", f"/api/deliveries/{UUID}/redeliver"),
        ("POST", "/api/openapi.json"),
        ("DELETE", "/api/openapi.json"),
        ("TRACE", "/api/pollers"),
        ("BREW", "/api/pollers"),
    ],
)
def test_wrong_methods_are_json_405(client, method, path):
    r = client.generic(method, path, b"", **AUTH)
    assert api_error(r, 405)["code"] == "method_not_allowed"
    assert r["Allow"]


def test_unauthenticated_bad_input_is_still_json(jobs):
    c = Client()
    api_error(c.get("/api/pollers?kind=%00"), 401)
    api_error(c.get("/api/pollers/%00"), 400, 401, 404)
    api_error(
        c.generic(
            "POST", "/api/pollers/alpha/reset", b"[" * 30_000, content_type="application/json"
        ),
        400,
        401,
    )
    api_error(c.post("/api/nothing", {"a": 1}), 404)


def test_an_error_page_django_renders_itself_is_json_under_api(client):
    """A bad Host header fails in Django's own middleware (DisallowedHost, an HTML 400
    page elsewhere): under /api/ it is the JSON envelope."""
    r = client.get("/api/pollers", HTTP_HOST="evil.example", **AUTH)
    api_error(r, 400)
    page = client.get("/healthz", HTTP_HOST="evil.example")
    assert page.status_code == 400 and not page["Content-Type"].startswith("application/json")


def test_huge_query_strings_are_json_400(client):
    many = "&".join(f"f{i}=1" for i in range(2000))  # past DATA_UPLOAD_MAX_NUMBER_FIELDS
    api_error(client.get(f"/api/pollers?{many}", **AUTH), 400)
    api_error(client.get("/api/pollers?kind=" + "k" * 100_000, **AUTH), 400)
    api_error(client.get("/api/deliveries?after=" + "%00" * 10_000, **AUTH), 400)


@pytest.mark.parametrize(
    "path",
    [
        "/api/pollers/alpha/reset",
        "/api/pollers/alpha/run",
        "/api/pollers/reload",
        f"/api/deliveries/{UUID}/redeliver",
        "/api/pollers/alpha/pause",
    ],
)
def test_a_session_form_body_is_json_4xx_not_a_500(jobs, path):
    """The CSRF check parses a form body; reading it as JSON afterwards used to raise
    RawPostDataException (a 500)."""
    from .test_auth import csrf_cookie

    c = Client(enforce_csrf_checks=True)
    c.force_login(
        staff(
            "op",
            "admin_ext.operate_job",
            "admin_ext.view_job",
            "admin_ext.redeliver",
            "admin_ext.reload_config",
        )
    )
    token = csrf_cookie(c)
    before = snapshot()
    for data in ({"confirm": "true"}, {"f": ("x" * 100)}):  # multipart/form-data
        r = c.post(path, data, HTTP_X_CSRFTOKEN=token)
        if path.endswith("/pause"):  # takes no body: the form is ignored
            assert r.status_code == 200
            continue
        api_error(r, 400)
    if not path.endswith("/pause"):
        assert snapshot() == before


@pytest.mark.parametrize("length", ["-1", "abc", "1e3", " 12", "99999999999999999999999"])
def test_odd_content_lengths_are_json_answers(client, length):
    r = client.generic(
        "POST",
        "/api/pollers/alpha/reset",
        b'{"confirm": true}',
        content_type="application/json",
        CONTENT_LENGTH=length,
        **AUTH,
    )
    assert r["Content-Type"].startswith("application/json") and r.status_code < 500


def test_a_4300_digit_number_is_a_json_400(client):
    api_error(post(client, "/api/pollers/alpha/run", b'{"force": ' + b"9" * 5000 + b"}"), 400)
