"""A job may be named like an API verb (``reload``, ``run``, ``pause``…) or hold ``.``,
``-`` and ``_``: every job path still reaches it, and POST /api/pollers/reload still
reloads."""

from __future__ import annotations

import uuid

import pytest

from nexopoll.models import PollState
from tests.runtime.conftest import scripted

NAMES = ["reload", "run", "dry-run", "pause", "runs", "a.b-c_d", "v1.2", "x_y-z"]


@pytest.fixture
def verb_jobs(cfg):
    cfg.write([scripted(name) for name in NAMES])
    cfg.reload()
    return cfg


@pytest.mark.parametrize("name", NAMES)
def test_every_job_path_reaches_a_verb_named_job(api, verb_jobs, name):
    shown = api.get(f"/api/pollers/{name}")
    assert shown.status_code == 200, shown.content
    assert shown.json()["id"] == name

    paused = api.post(f"/api/pollers/{name}/pause")
    assert paused.status_code == 200, paused.content
    assert paused.json()["action"] == "paused" and paused.json()["job_id"] == name
    assert PollState.objects.get(job_id=name).paused is True

    resumed = api.post(f"/api/pollers/{name}/resume")
    assert resumed.status_code == 200 and resumed.json()["job"]["id"] == name
    assert PollState.objects.get(job_id=name).paused is False

    reset = api.post(f"/api/pollers/{name}/reset", {"confirm": True})
    assert reset.status_code == 200 and reset.json()["action"] == "reset"

    missing = api.get(f"/api/pollers/{name}/runs/{uuid.uuid4()}")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    assert name in missing.json()["error"]["message"]


def test_post_reload_still_reloads_beside_a_job_named_reload(api, verb_jobs):
    plan = api.post("/api/pollers/reload", {"dry_run": True})
    assert plan.status_code == 200, plan.content
    assert sorted(plan.json()["keep"]) == sorted(NAMES)
    assert api.get("/api/pollers/reload").json()["id"] == "reload"


def test_only_get_and_post_on_reload(api, verb_jobs):
    r = api.client.delete("/api/pollers/reload", HTTP_AUTHORIZATION=f"Bearer {api.token}")
    assert r.status_code == 405
    assert r.json()["error"]["code"] == "method_not_allowed"
