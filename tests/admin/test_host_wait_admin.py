"""The job's page says when its ticks wait for a turn on a capped host (issue 19)."""

from __future__ import annotations

from django.test import Client

from nexopoll.runtime import hostwait

from .conftest import scripted

JOBS = "/admin/admin_ext/job/"


def detail(user, job_id: str) -> str:
    c = Client()
    c.force_login(user)
    return c.get(f"{JOBS}{job_id}/change/", follow=True).content.decode()


def test_the_job_page_notes_waits_on_a_host_cap(cfg, operator, redis_client):
    cfg.write([scripted("alpha"), scripted("beta")])
    cfg.reload()
    hostwait.record(redis_client, "api.example.test", 0.42, job_id="alpha", cap=16)
    html = detail(operator, "alpha")
    assert 'id="job-host-wait"' in html
    assert "api.example.test" in html and "in-flight cap 16" in html and "420 ms" in html
    assert "cap ÷ latency" in html
    assert 'id="job-host-wait"' not in detail(operator, "beta")
