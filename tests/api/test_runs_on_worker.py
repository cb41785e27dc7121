"""Run and dry run tick on a real Celery worker, never in the web process: a slow source
makes the API answer 202 and a status URL within ``NEXOPOLL_RUN_WAIT_SECS``, and the
result is there once the worker is done (RELIABILITY: a 45 s source used to hit
gunicorn's 30 s timeout, a 500 and a killed web worker, with nothing recorded)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from nexopoll.models import Delivery, PollState
from tests.support.httpserver import TestHTTPServer
from tests.support.jobs import webhook_poll_job
from tests.support.procs import wait_for

from .test_pollers_api import error


def slow_job(url: str) -> dict:
    return webhook_poll_job("slow", url)


def gated_source(server: TestHTTPServer, gate: threading.Event, reached: threading.Event) -> None:
    """A source that answers only once the test opens ``gate`` (a slow source, on demand)."""

    def items(req):
        reached.set()
        gate.wait(60)
        body = {"items": [{"id": 1, "title": "one"}, {"id": 2, "title": "two"}]}
        return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()

    server.route("GET", "/items", items)


@contextmanager
def slow_job_loaded(cfg) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Job ``slow`` loaded, its source a :func:`gated_source`; yields ``(gate, reached)``."""
    gate, reached = threading.Event(), threading.Event()
    with TestHTTPServer() as server:
        gated_source(server, gate, reached)
        cfg.write([slow_job(server.url("/items"))], agents={"ana": {"log": {}}})
        cfg.reload()
        yield gate, reached


def timed_post(api, url: str, body=None):
    started = time.monotonic()
    r = api.post(url, body)
    return r, time.monotonic() - started


def test_a_slow_run_answers_202_and_its_status_url_gives_the_result(
    api, cfg, start_worker, settings
):
    settings.NEXOPOLL_RUN_WAIT_SECS = 1.0
    start_worker()
    with slow_job_loaded(cfg) as (gate, reached):
        try:
            r, took = timed_post(api, "/api/pollers/slow/run")
            assert r.status_code == 202, r.content
            assert 1.0 <= took < 5, took  # the bounded wait, not the source's time
            url = r.json()["status_url"]
            assert r["Location"] == url == f"/api/pollers/slow/runs/{r.json()['task_id']}"
            assert reached.wait(30)  # the worker, not the web process, is polling
            assert api.get(url).json()["state"] in ("queued", "running")
        finally:
            gate.set()
        done = wait_for(lambda: (b := api.get(url).json())["state"] == "done" and b, 30)
    result = done["result"]
    assert result["committed"] and result["status"] == "ok" and result["next_cursor"]
    assert len(result["delivery_ids"]) == 2 == Delivery.objects.filter(job_id="slow").count()
    assert PollState.objects.get(job_id="slow").ticks_total == 1


def test_a_slow_dry_run_answers_202_and_commits_nothing(api, cfg, start_worker, settings):
    settings.NEXOPOLL_RUN_WAIT_SECS = 0.5
    start_worker()
    with slow_job_loaded(cfg) as (gate, reached):
        try:
            r, took = timed_post(api, "/api/pollers/slow/dry-run")
            assert r.status_code == 202 and took < 5, (r.content, took)
            assert reached.wait(30)
        finally:
            gate.set()
        url = r.json()["status_url"]
        done = wait_for(lambda: (b := api.get(url).json())["state"] == "done" and b, 30)
    assert done["result"]["dry_run"] and not done["result"]["committed"]
    assert [d["payload"]["text"] for d in done["result"]["deliveries"]] == ["one", "two"]
    assert not Delivery.objects.exists() and PollState.objects.get(job_id="slow").cursor is None


def test_without_a_worker_the_wait_ends_in_202_and_the_run_stays_queued(
    api, jobs, redis_client, settings
):
    settings.NEXOPOLL_RUN_WAIT_SECS = 0.3
    r, took = timed_post(api, "/api/pollers/alpha/dry-run")
    assert r.status_code == 202 and took < 3
    assert api.get(r.json()["status_url"]).json()["state"] == "queued"
    assert redis_client.llen("nexopoll") == 1


def test_a_run_status_url_of_nothing_is_a_json_404_or_400(api, jobs):
    error(api.get("/api/pollers/alpha/runs/0b6e2a52-3c0a-4c6e-9d57-1f8e2f6f6c11"), 404)
    error(api.get("/api/pollers/alpha/runs/not-a-task"), 400)
    error(api.get("/api/pollers/nope/runs/0b6e2a52-3c0a-4c6e-9d57-1f8e2f6f6c11"), 404)
    error(api.post("/api/pollers/alpha/runs/0b6e2a52-3c0a-4c6e-9d57-1f8e2f6f6c11"), 405)


def test_a_run_stored_before_the_upgrade_reads_as_done(api, jobs):
    """Results of ``nexopoll.run_now`` kept from before runs stored their whole tick."""
    from django.utils import timezone
    from django_celery_results.models import TaskResult

    TaskResult.objects.create(
        task_id="5f0c3a52-3c0a-4c6e-9d57-1f8e2f6f6c11",
        task_name="nexopoll.run_now",
        periodic_task_name="alpha",
        status="SUCCESS",
        content_type="application/json",
        content_encoding="utf-8",
        date_done=timezone.now(),
        result=json.dumps(
            {
                "status": "ok",
                "items_seen": 2,
                "items_dispatched": 2,
                "error": "",
                "deliveries": 2,
                "committed": True,
            }
        ),
    )
    body = api.get("/api/pollers/alpha/runs/5f0c3a52-3c0a-4c6e-9d57-1f8e2f6f6c11").json()
    assert body["state"] == "done" and body["result"]["committed"]
    assert body["result"]["items_dispatched"] == 2
    error(api.get("/api/pollers/beta/runs/5f0c3a52-3c0a-4c6e-9d57-1f8e2f6f6c11"), 404)


def test_runs_keep_auth_csrf_and_permissions(api, jobs, redis_client, settings):
    from django.test import Client

    from .conftest import staff
    from .test_auth import csrf_cookie

    settings.NEXOPOLL_RUN_WAIT_SECS = 0.1
    queued = api.post("/api/pollers/alpha/run", {"wait": False}).json()["status_url"]
    assert redis_client.llen("nexopoll") == 1
    error(Client().get(queued), 401)
    error(Client().post("/api/pollers/alpha/dry-run"), 401)
    viewer = Client(enforce_csrf_checks=True)
    viewer.force_login(staff("viewer", "admin_ext.view_job"))
    assert "operate_job" in error(viewer.get(queued), 403)
    token = csrf_cookie(viewer)
    error(viewer.post("/api/pollers/alpha/dry-run", HTTP_X_CSRFTOKEN=token), 403)
    op = Client(enforce_csrf_checks=True)
    op.force_login(staff("op", "admin_ext.view_job", "admin_ext.operate_job"))
    error(op.post("/api/pollers/alpha/dry-run"), 403, "csrf_failed")  # no CSRF token
    assert redis_client.llen("nexopoll") == 1  # nothing more was queued
    assert op.get(queued).json()["state"] == "queued"
    token = csrf_cookie(op)
    r = op.post("/api/pollers/alpha/dry-run", HTTP_X_CSRFTOKEN=token)
    assert r.status_code == 202 and redis_client.llen("nexopoll") == 2
