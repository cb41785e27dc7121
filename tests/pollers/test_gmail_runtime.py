"""gmail through the real tick (DB + Redis): mark-read only after the commit."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import F
from django.utils import timezone

from nexopoll import services
from nexopoll.models import Delivery, PollState
from nexopoll.runtime.tick import tick_job
from tests.runtime.conftest import Config
from tests.support.google_server import gmail_message, write_credentials


@pytest.fixture
def cfg(tmp_path, redis_client, transactional_db, google) -> Config:
    config = Config(tmp_path / "pollers.yaml")
    binding = write_credentials(tmp_path, google)
    job = {
        "id": "leads",
        "kind": "gmail",
        "agent": "ana",
        "schedule": {"every_secs": 60},
        "config": {
            "query": "is:unread",
            "message_template": "{subject}",
            "deliver": {"channel": "log", "to": "ops"},
        },
    }
    config.write([job], agents={"ana": {"google": binding}})
    config.reload()
    return config


def test_mark_read_runs_after_the_commit(cfg, google):
    google.add_message(gmail_message("m1", subject="Olá 👋"))
    seen_at_get: list[int] = []
    google.on_get = lambda path: seen_at_get.append(google.unread("m1"))
    report = tick_job("leads", now=timezone.now())
    assert report.status == "ok" and report.committed
    assert [d.payload["text"] for d in Delivery.objects.filter(job_id="leads")] == ["Olá 👋"]
    assert seen_at_get == [True] and not google.unread("m1")
    assert len(google.calls("modify")) == 1


def test_a_tick_that_fails_to_commit_leaves_the_mail_unread(cfg, google):
    """The epoch moves on while the poller runs: the commit is fenced, nothing is marked."""
    google.add_message(gmail_message("m1"))

    def another_tick_wins(path: str) -> None:
        try:
            PollState.objects.filter(job_id="leads").update(epoch=F("epoch") + 1)
        finally:
            connection.close()  # the server thread's own DB connection

    google.on_get = another_tick_wins
    report = tick_job("leads", now=timezone.now())
    assert report.status == "fenced" and not report.committed
    assert google.calls("modify") == [] and google.unread("m1")
    assert not Delivery.objects.filter(job_id="leads").exists()
    assert PollState.objects.get(job_id="leads").cursor is None
    # the next tick delivers the mail and only then marks it read
    google.on_get = None
    again = tick_job("leads", now=timezone.now())
    assert again.status == "ok" and Delivery.objects.filter(job_id="leads").count() == 1
    assert not google.unread("m1")


def test_a_dry_run_marks_nothing(cfg, google):
    google.add_message(gmail_message("m1"))
    report = services.run_job("leads", now=timezone.now(), dry_run=True)
    assert len(report.deliveries) == 1 and google.calls("modify") == []
    assert google.unread("m1")


def test_a_revoked_token_pauses_the_job(cfg, google):
    google.add_message(gmail_message("m1"))
    google.token_mode = "revoked"
    report = tick_job("leads", now=timezone.now())
    state = PollState.objects.get(job_id="leads")
    assert report.status == "permanent" and state.paused
    assert "expired or revoked" in state.paused_reason


def test_gmail_count_unread_tool_through_the_runtime_changes_no_state(cfg, google):
    from nexopoll.runtime.host import call_job_tool

    for i in range(3):
        google.add_message(gmail_message(f"m{i}"))
    before = PollState.objects.filter(job_id="leads").values().get()
    result = call_job_tool("leads", "gmail_count_unread", {})
    assert result == {"job_id": "leads", "unread": 3, "capped": False}
    assert PollState.objects.filter(job_id="leads").values().get() == before
    assert not Delivery.objects.exists() and google.calls("modify") == []
    assert all(google.unread(f"m{i}") for i in range(3))
