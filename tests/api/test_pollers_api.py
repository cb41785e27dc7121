"""/api/pollers…: every endpoint's effect checked in the DB, errors as JSON."""

from __future__ import annotations

import time

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from nexopoll import services
from nexopoll.models import PollJob, PollState
from tests.runtime.conftest import scripted
from tests.support.scale import scripted_job_rows


def state(job_id: str) -> PollState:
    return PollState.objects.get(job_id=job_id)


def error(response, status: int, code: str | None = None) -> str:
    assert response.status_code == status, (response.status_code, response.content)
    body = response.json()
    assert set(body) == {"error"} and {"code", "message"} <= set(body["error"])
    if code:
        assert body["error"]["code"] == code
    return body["error"]["message"]


def test_list_filters_and_pages(api, jobs, redis_client):
    redis_client.rpush("test:src:alpha", 1)
    assert services.run_job("alpha", now=timezone.now()).status == "ok"
    r = api.get("/api/pollers")
    assert r.status_code == 200
    body = r.json()
    assert [j["id"] for j in body["items"]] == ["alpha", "beta", "gamma"]
    assert body["total"] == 3 and body["next_after"] is None
    assert [j["id"] for j in api.get("/api/pollers?paused=true").json()["items"]] == ["gamma"]
    assert [j["id"] for j in api.get("/api/pollers?paused=false").json()["items"]] == [
        "alpha",
        "beta",
    ]
    assert [j["id"] for j in api.get("/api/pollers?status=ok").json()["items"]] == ["alpha"]
    assert api.get("/api/pollers?status=never").json()["total"] == 2
    assert api.get("/api/pollers?kind=scripted&agent=ana").json()["total"] == 3
    assert api.get("/api/pollers?agent=nobody").json() == {
        "items": [],
        "total": 0,
        "next_after": None,
    }
    page1 = api.get("/api/pollers?limit=2").json()
    assert [j["id"] for j in page1["items"]] == ["alpha", "beta"] and page1["next_after"] == "beta"
    page2 = api.get("/api/pollers?limit=2&after=beta").json()
    assert [j["id"] for j in page2["items"]] == ["gamma"] and page2["next_after"] is None


def test_bad_queries_are_400(api, jobs):
    error(api.get("/api/pollers?limit=0"), 400, "bad_request")
    error(api.get("/api/pollers?limit=abc"), 400)
    error(api.get("/api/pollers?status=weird"), 400)
    error(api.get("/api/pollers?colour=red"), 400)
    error(api.get("/api/pollers?limit=1&limit=2"), 400)


def test_show_unknown_and_malformed_ids(api, jobs):
    r = api.get("/api/pollers/alpha")
    assert r.status_code == 200
    assert r.json()["config"] == {"deliver": {"channel": "log", "to": "ops"}}
    assert r.json()["cursor"] is None and r.json()["pending_deliveries"] == 0
    assert "nope" in error(api.get("/api/pollers/nope"), 404, "not_found")
    error(api.get("/api/pollers/Alpha%0A"), 400)
    error(api.get("/api/pollers/..%2F..%2Fetc"), 404)  # a slash never reaches a job lookup
    error(api.get("/api/nothing/here"), 404)


def test_run_commits_and_dry_run_does_not(api, jobs, redis_client, start_worker):
    start_worker()  # runs tick on a worker, never in the web process
    redis_client.rpush("test:src:alpha", 1, 2)
    dry = api.post("/api/pollers/alpha/dry-run").json()
    assert dry["dry_run"] and not dry["committed"] and dry["next_cursor"] == "2"
    assert [d["payload"]["item_id"] for d in dry["deliveries"]] == [1, 2]
    assert state("alpha").cursor is None and state("alpha").ticks_total == 0
    run = api.post("/api/pollers/alpha/run", {"wait": True})
    assert run.status_code == 200 and run.json()["committed"]
    assert len(run.json()["delivery_ids"]) == 2
    assert bytes(state("alpha").cursor) == b"2" and state("alpha").ticks_total == 1


def test_run_async_queues_a_task(api, jobs, redis_client):
    r = api.post("/api/pollers/alpha/run", {"wait": False})
    assert r.status_code == 202 and r.json()["task_id"]
    url = f"/api/pollers/alpha/runs/{r.json()['task_id']}"
    assert r.json()["status_url"] == r["Location"] == url
    assert redis_client.llen("nexopoll") == 1  # the Celery queue: a worker will tick it
    assert state("alpha").ticks_total == 0
    assert api.get(url).json() == {
        "job_id": "alpha",
        "task_id": r.json()["task_id"],
        "state": "queued",
        "result": None,
        "error": None,
    }
    error(api.get(url.replace("alpha", "beta")), 404)  # another job's run is not found


def test_pause_resume(api, jobs):
    r = api.post("/api/pollers/alpha/pause")
    assert r.status_code == 200 and r.json()["job"]["paused"] is True
    assert state("alpha").paused and "API" in state("alpha").paused_reason
    r = api.post("/api/pollers/alpha/resume")
    assert r.status_code == 200 and not state("alpha").paused
    error(api.post("/api/pollers/nope/pause"), 404)


def test_reset_needs_confirm_true(api, jobs, redis_client):
    redis_client.rpush("test:src:alpha", 1)
    services.run_job("alpha", now=timezone.now())
    before = state("alpha")
    assert bytes(before.cursor) == b"1"
    assert "confirm" in error(api.post("/api/pollers/alpha/reset"), 422, "invalid")
    error(api.post("/api/pollers/alpha/reset", {"confirm": False}), 422)
    for almost in (1, 1.0, "true", "yes", [True], {"v": True}, None):  # only JSON true
        assert "confirm" in error(api.post("/api/pollers/alpha/reset", {"confirm": almost}), 422)
    error(api.post("/api/pollers/alpha/reset", {"confirm": True, "also": 1}), 422)
    assert bytes(state("alpha").cursor) == b"1" and state("alpha").epoch == before.epoch
    r = api.post("/api/pollers/alpha/reset", {"confirm": True})
    assert r.status_code == 200 and r.json()["action"] == "reset"
    after = state("alpha")
    assert after.cursor is None and after.epoch == before.epoch + 1


def test_malformed_and_non_json_bodies(api, jobs):
    error(api.post_raw("/api/pollers/alpha/reset", "{nope", "application/json"), 400)
    error(api.post_raw("/api/pollers/alpha/reset", "confirm=true", "text/plain"), 400)
    error(api.post("/api/pollers/alpha/reset", [1, 2]), 422)
    assert state("alpha").epoch == 0
    r = api.client.delete("/api/pollers/alpha", HTTP_AUTHORIZATION=f"Bearer {api.token}")
    error(r, 405)


def test_reload_plan_apply_and_strict(api, jobs):
    jobs.write([scripted("alpha"), scripted("beta"), scripted("delta")])
    plan = api.post("/api/pollers/reload", {"dry_run": True}).json()
    assert plan["add"] == ["delta"] and plan["remove"] == ["gamma"] and not plan["applied"]
    assert not PollJob.objects.filter(job_id="delta").exists()
    applied = api.post("/api/pollers/reload", {"dry_run": False}).json()
    assert applied["applied"] and PollJob.objects.filter(job_id="delta").exists()
    assert not PollJob.objects.filter(job_id="gamma").exists()
    bad = scripted("epsilon")
    bad["config"] = {}  # the scripted kind needs deliver: invalid
    jobs.write([scripted("alpha"), bad])
    r = api.post("/api/pollers/reload", {"strict": True})
    error(r, 422)
    assert r.json()["error"]["details"] and PollJob.objects.filter(job_id="delta").exists()
    jobs.write_text("pollers: [unclosed")
    error(api.post("/api/pollers/reload", {}), 422)
    assert PollJob.objects.filter(job_id="delta").exists()


def test_ten_thousand_jobs_list_fast(api, cfg):
    scripted_job_rows(f"job{i:05d}" for i in range(10_000))
    PollState.objects.bulk_create(
        [PollState(job_id=f"job{i:05d}", paused=i % 2 == 0) for i in range(10_000)],
        batch_size=1000,
    )
    for url in (
        "/api/pollers?limit=100",
        "/api/pollers?limit=500&after=job09000",
        "/api/pollers?paused=true&limit=100&after=job05000",
    ):
        started = time.monotonic()
        with CaptureQueriesContext(connection) as queries:
            r = api.get(url)
        elapsed = time.monotonic() - started
        assert r.status_code == 200 and r.json()["items"]
        assert len(queries) <= 4, [q["sql"] for q in queries]
        assert elapsed < 1.5, f"{url} took {elapsed:.2f} s"
    assert api.get("/api/pollers?paused=true&limit=1").json()["total"] == 5000


def test_run_of_a_paused_job_is_409_unless_forced(api, jobs, redis_client, start_worker):
    start_worker()
    redis_client.rpush("test:src:gamma", 1)  # gamma is paused on boot
    assert "paused" in error(api.post("/api/pollers/gamma/run"), 409, "conflict")
    assert state("gamma").ticks_total == 0
    r = api.post("/api/pollers/gamma/run", {"force": True})
    assert r.status_code == 200 and r.json()["committed"]
    assert state("gamma").ticks_total == 1 and state("gamma").paused
    assert api.post("/api/pollers/gamma/dry-run").status_code == 200  # a dry run always may
