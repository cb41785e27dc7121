"""The API's view of a paused job (no next run), of a resumed one (its next slot) and
of a poller's notice."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from nexopoll.runtime.tick import tick_job
from tests.runtime.test_notice import google, rebaselined  # noqa: F401  (fixture)


def test_paused_jobs_have_no_next_run_and_resumed_ones_their_next_slot(api, jobs):
    tick_job("alpha", now=timezone.now() - timedelta(hours=1))  # next_run_at an hour old
    api.post("/api/pollers/alpha/pause")
    listed = api.get("/api/pollers").json()["items"]
    shown = api.get("/api/pollers/alpha").json()
    for view in (shown, next(j for j in listed if j["id"] == "alpha")):
        assert view["paused"] is True and view["paused_by"] == "operator"
        assert view["next_run_at"] is None and view["next_slot_at"] is None
    gamma = api.get("/api/pollers/gamma").json()  # paused_on_boot
    assert gamma["paused_by"] == "boot" and gamma["next_run_at"] is None
    api.post("/api/pollers/alpha/resume")
    now = timezone.now()
    view = api.get("/api/pollers/alpha").json()
    assert view["paused"] is False and view["next_run_at"] == view["next_slot_at"]
    assert now < datetime.fromisoformat(view["next_run_at"]) <= now + timedelta(seconds=60)


def test_a_pollers_notice_is_in_the_job_view(api, cfg, google, tmp_path):  # noqa: F811
    state = rebaselined(cfg, google, tmp_path)
    view = api.get("/api/pollers/cal").json()
    assert view["notice"] == state.notice and "410" in view["notice"]
    assert view["notice_at"] == state.notice_at.isoformat()
    listed = api.get("/api/pollers").json()["items"][0]
    assert listed["notice"] == state.notice
