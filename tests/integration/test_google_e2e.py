"""gmail and google_calendar end to end: real worker and beat, the local Google server."""

from __future__ import annotations

import json

import pytest
import yaml

from nexopoll.models import PollState
from tests.support.google_server import FakeGoogle, gmail_message, write_credentials
from tests.support.procs import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def write(stack, google, tmp_path, job: dict) -> None:
    binding = write_credentials(tmp_path, google)
    doc = {
        "pollers": {"default_jitter_ms": 0, "jobs": [job]},
        "agents": {
            "ana": {
                "webhook": {"url": stack.sink.url, "allow_private_networks": True},
                "google": binding,
            }
        },
    }
    stack.config.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    stack.env_extra["NEXOPOLL_GMAIL_API_BASE"] = google.url
    stack.env_extra["NEXOPOLL_GCAL_API_BASE"] = google.url + "/calendar/v3"
    stack.reload()


def cursor(job_id: str) -> dict:
    raw = PollState.objects.get(job_id=job_id).cursor
    return json.loads(bytes(raw)) if raw else {}


def test_gmail_delivers_each_mail_once_and_marks_it_read_after_commit(stack, tmp_path):
    with FakeGoogle() as google:
        google.add_message(gmail_message("m1", subject="Pedido ñ 🚀", internal_date=1))
        google.add_message(gmail_message("m2", subject="second", internal_date=2))
        job = {
            "id": "leads",
            "kind": "gmail",
            "agent": "ana",
            "schedule": {"every_secs": 1, "stagger_jitter_ms": 0},
            "config": {
                "query": "is:unread",
                "message_template": "{subject}",
                "deliver": {"channel": "webhook", "to": "ops"},
            },
        }
        write(stack, google, tmp_path, job)
        stack.worker()
        stack.beat()
        wait_for(lambda: len(stack.sink.items("leads")) >= 2, 60, what="two mails delivered")
        wait_for(lambda: not google.unread("m1") and not google.unread("m2"), 30, what="read")
        google.add_message(gmail_message("m3", subject="third", internal_date=3))
        wait_for(lambda: not google.unread("m3"), 60, what="third mail handled")
        wait_for(lambda: len(stack.sink.items("leads")) >= 3, 30, what="third delivery")
        ticks = PollState.objects.get(job_id="leads").ticks_total
        wait_for(lambda: PollState.objects.get(job_id="leads").ticks_total >= ticks + 2, 30)
        texts = sorted(h["body"]["payload"]["text"] for h in stack.sink.items("leads"))
        assert texts == ["Pedido ñ 🚀", "second", "third"]
        assert set(cursor("leads")["seen"]) == {"m1", "m2", "m3"}
        # one mark-read per mail (each after its tick committed), never repeated
        assert len(google.calls("modify")) == 3
        assert len(google.calls("token")) == 1  # one refresh, reused by every tick


def test_google_calendar_baseline_changes_and_410_rebaseline(stack, tmp_path):
    with FakeGoogle() as google:
        google.put_event("old", summary="Existing")
        job = {
            "id": "cal",
            "kind": "google_calendar",
            "agent": "ana",
            "schedule": {"every_secs": 1, "stagger_jitter_ms": 0},
            "config": {"deliver": {"channel": "webhook", "to": "ops"}},
        }
        write(stack, google, tmp_path, job)
        stack.worker()
        stack.beat()
        wait_for(lambda: cursor("cal").get("sync_token"), 60, what="baseline")
        google.put_event("new", summary="Planning ☕")
        wait_for(lambda: stack.sink.items("cal"), 60, what="the new event")
        (hit,) = stack.sink.items("cal")
        assert hit["body"]["payload"]["text"] == (
            "📅 Planning ☕ — 2026-12-01T10:00:00Z\nhttps://calendar.example/new"
        )
        google.expire_sync_tokens()
        wait_for(lambda: cursor("cal").get("rebaselined_at"), 60, what="re-baseline after 410")
        state = PollState.objects.get(job_id="cal")
        assert not state.paused and state.last_status == "ok"
        google.put_event("later", summary="After")
        wait_for(lambda: len(stack.sink.items("cal")) >= 2, 60, what="event after re-baseline")
        assert [h["body"]["payload"]["item_id"] for h in stack.sink.items("cal")] == [
            "new",
            "later",
        ]
