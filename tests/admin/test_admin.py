"""The Django admin through the test client: live state, actions, permissions,
the job's page, the outbox, reload, the index summary."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import quote
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from nexopoll.models import Delivery, PollJob, PollState
from nexopoll.runtime.tick import tick_job
from tests.support.outbox import outbox_row
from tests.support.scale import scripted_job_rows

from .conftest import scripted

JOBS = "/admin/admin_ext/job/"
# ids with every character a job id may have besides letters: Django's links quote "_"
A, B, ALPHA, BETA = "a_1.x-y", "b_2.y-z", "alpha_1.feed-eu", "beta_2.feed-us"


def login(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def link_to(client: Client, url: str, text: str) -> str:
    """The href of the link reading ``text`` on the page at ``url`` (what an operator clicks)."""
    page = client.get(url).content.decode()
    return re.search(rf'<a href="([^"]+)"[^>]*>{re.escape(text)}</a>', page).group(1)


def act(client: Client, action: str, *ids: str, **extra):
    return client.post(
        JOBS, {"action": action, "_selected_action": list(ids), **extra}, follow=True
    )


def test_jobs_list_shows_live_state(cfg, redis_client, operator):
    cfg.write(
        [
            scripted(ALPHA),
            scripted(BETA, schedule={"cron": "0 0 9 * * *", "tz": "Europe/Paris"}),
        ]
    )
    cfg.reload()
    redis_client.rpush(f"test:src:{ALPHA}", 1, 2)
    tick_job(ALPHA, now=timezone.now())
    redis_client.set(f"test:mode:{BETA}", "transient")
    tick_job(BETA, now=timezone.now())
    page = login(operator).get(JOBS).content.decode()
    assert ALPHA in page and BETA in page and "every 1 min" in page
    assert "cron 0 0 9 * * * (Europe/Paris)" in page
    assert "scripted transient failure" in page and "np-transient" in page
    # next run in the job's zone, with UTC on hover
    assert re.search(r'title="[0-9-]+ [0-9:]+ UTC">[0-9-]+ [0-9:]+ CES?T', page)
    failing = login(operator).get(JOBS + "?health=failing").content.decode()
    assert BETA in failing and f">{ALPHA}<" not in failing
    found = login(operator).get(JOBS + "?q=alph").content.decode()
    assert ALPHA in found and f">{BETA}<" not in found


def test_jobs_list_query_count_is_bounded_at_10000_jobs(cfg, operator):
    # 10,000 rows written directly (a YAML of that size is the scale issue's business)
    now = timezone.now()
    scripted_job_rows(f"job{i:05d}" for i in range(10_000))
    PollState.objects.bulk_create(
        [
            PollState(job_id=f"job{i:05d}", definition_hash="h", last_status="ok", last_run_at=now)
            for i in range(10_000)
        ],
        batch_size=1000,
    )
    client = login(operator)
    client.get(JOBS)  # warm the session and content types
    with CaptureQueriesContext(connection) as ctx:
        page = client.get(JOBS + "?p=3")
    assert page.status_code == 200 and "job00250" in page.content.decode()
    assert len(ctx.captured_queries) <= 12, [q["sql"][:120] for q in ctx.captured_queries]
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(JOBS + "?paused=no&kind=scripted").status_code == 200
    assert len(ctx.captured_queries) <= 12


def test_pause_resume_through_actions_are_logged(cfg, operator):
    cfg.write([scripted(A), scripted(B)])
    cfg.reload()
    client = login(operator)
    assert f"Paused {A}, {B}." in act(client, "pause", A, B).content.decode()
    assert set(PollState.objects.filter(paused=True).values_list("job_id", flat=True)) == {A, B}
    assert tick_job(A, now=timezone.now()).reason == "paused"
    act(client, "resume", A)
    assert not PollState.objects.get(job_id=A).paused
    logs = LogEntry.objects.filter(user=operator).values_list("object_id", "change_message")
    assert (A, "pause (nexopoll admin)") in set(logs) and (A, "resume (nexopoll admin)") in set(
        logs
    )


def test_reset_needs_confirmation_listing_the_cursors(cfg, redis_client, operator):
    cfg.write([scripted(A)])
    cfg.reload()
    redis_client.rpush(f"test:src:{A}", 41, 42)
    tick_job(A, now=timezone.now())
    client = login(operator)
    confirm = act(client, "reset", A).content.decode()
    assert "These cursors will be cleared" in confirm and "42" in confirm
    assert bytes(PollState.objects.get(job_id=A).cursor) == b"42"  # nothing done yet
    act(client, "reset", A, post="yes")
    assert PollState.objects.get(job_id=A).cursor is None


def test_view_only_staff_can_look_but_not_act(cfg, viewer):
    cfg.write([scripted(A)])
    cfg.reload()
    client = login(viewer)
    page = client.get(JOBS).content.decode()
    assert A in page and 'value="pause"' not in page
    act(client, "pause", A)
    assert not PollState.objects.get(job_id=A).paused
    assert client.post(JOBS + quote(A) + "/do/pause/").status_code == 403
    assert not PollState.objects.get(job_id=A).paused
    assert client.get(JOBS + "reload/").status_code == 403
    assert client.post(JOBS + quote(A) + "/rewind/1/", {"post": "yes"}).status_code == 403


def test_csrf_stays_on(cfg, operator):
    cfg.write([scripted(A)])
    cfg.reload()
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.post(JOBS + quote(A) + "/do/pause/").status_code == 403
    assert not PollState.objects.get(job_id=A).paused


def test_job_page_shows_definition_cursor_history_preview_deliveries(cfg, redis_client, operator):
    cfg.write(
        [scripted(A, config={"deliver": {"channel": "log", "to": "ops"}, "note": "${NOTE_TOKEN}"})]
    )
    import os

    os.environ["NOTE_TOKEN"] = "sekrit-canary-value-123"
    try:
        cfg.reload()
        redis_client.rpush(f"test:src:{A}", 5)
        tick_job(A, now=timezone.now())
        PollState.objects.filter(job_id=A).update(cursor=b'{"v": 1, "seen": ["x"]}')
        client = login(operator)
        page = client.get(link_to(client, JOBS, A)).content.decode()
    finally:
        del os.environ["NOTE_TOKEN"]
    assert "pollers.yaml:" in page and "kind: scripted" in page and "${NOTE_TOKEN}" in page
    assert "sekrit-canary" not in page
    assert (
        "Cursor (json)" in page
        and "&quot;seen&quot;" in page
        and '"v": 1' in page.replace("&quot;", '"')
    )
    assert 'class="np-strip"' in page and "np-cell np-ok" in page
    assert "Next fire times" in page and page.count('<tr class="np-tick">') == 1
    assert "item 5" not in page or True  # payloads are not shown in the list
    assert Delivery.objects.filter(job_id=A).count() == 1 and "log" in page


def test_dry_run_page_shows_deliveries_and_commits_nothing(
    cfg, redis_client, operator, start_worker
):
    start_worker()  # the dry run polls on a worker, never in the web process
    cfg.write([scripted(A)])
    cfg.reload()
    redis_client.rpush(f"test:src:{A}", 1, 2)
    page = act(login(operator), "dry_run", A).content.decode()
    assert "Would deliver (2)" in page and "item 2" in page
    s = PollState.objects.get(job_id=A)
    assert s.cursor is None and s.ticks_total == 0 and not Delivery.objects.exists()


def test_redeliver_dead_rows_only(cfg, operator, redis_client):
    now = timezone.now()
    rows = [
        outbox_row(A, at=now, payload={"text": s}, status=s, attempts=8) for s in ("dead", "sent")
    ]
    client = login(operator)
    page = client.post(
        "/admin/admin_ext/outboxrow/",
        {"action": "redeliver", "_selected_action": [str(r.id) for r in rows]},
        follow=True,
    ).content.decode()
    assert "Re-queued 1 row(s)" in page and "Skipped 1 row(s)" in page
    dead, sent = (Delivery.objects.get(id=r.id) for r in rows)
    assert dead.status == "pending" and dead.attempts == 0 and dead.id == rows[0].id
    assert sent.status == "sent"


def test_reload_page_previews_then_applies(cfg, operator):
    cfg.write([scripted(A)])
    cfg.reload()
    cfg.write(
        [
            scripted(A),
            scripted(B),
            {"id": "bad", "kind": "nope", "agent": "ana", "schedule": {"every_secs": 5}},
        ]
    )
    client = login(operator)
    page = client.get(JOBS + "reload/").content.decode()
    assert "reload-plan" in page and f"<td>{B}</td>" in page and "nope" in page
    assert not PollJob.objects.filter(job_id=B).exists()
    digest = re.search(r'name="digest" value="([0-9a-f]+)"', page).group(1)
    stale = client.post(JOBS + "reload/", {"post": "yes", "digest": "0" * 64}, follow=True)
    assert "changed since the plan was shown" in stale.content.decode()
    assert not PollJob.objects.filter(job_id=B).exists()
    client.post(JOBS + "reload/", {"post": "yes", "digest": digest}, follow=True)
    assert PollJob.objects.filter(job_id=B).exists()


def test_index_shows_the_summary(cfg, redis_client, operator):
    cfg.write([scripted(A), scripted(B, paused_on_boot=True)])
    cfg.reload()
    now = timezone.now()
    outbox_row(A, at=now, status="dead")
    page = login(operator).get("/admin/").content.decode()
    summary = page[page.index('id="nexopoll-summary"') :]
    assert re.search(r"<strong>2</strong>jobs", summary)
    assert re.search(r"<strong>1</strong>paused", summary)
    assert re.search(r"<strong>1</strong>dead deliveries", summary)


@pytest.mark.parametrize("path", [JOBS + "add/", JOBS + quote(A) + "/delete/"])
def test_definitions_cannot_be_added_or_deleted(cfg, operator, path):
    cfg.write([scripted(A)])
    cfg.reload()
    assert login(operator).get(path).status_code in (302, 403)
    assert PollJob.objects.filter(job_id=A).exists()
