"""A poller's notice (TickAck.notice): google_calendar's automatic re-baseline after a
410 shows on the job's status, with its time, wherever operators look."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.utils import timezone

from nexopoll import services
from nexopoll.models import PollState
from nexopoll.runtime.tick import tick_job
from tests.support.apibases import point_api
from tests.support.google_server import FakeGoogle, write_credentials


@pytest.fixture
def google(monkeypatch):
    with FakeGoogle() as fake:
        point_api(monkeypatch, "gcal", fake.url + "/calendar/v3")
        yield fake


def rebaselined(cfg, google, tmp_path) -> PollState:
    """A google_calendar job whose sync token expired (410): re-baselined by a real tick."""
    binding = write_credentials(tmp_path, google)
    job = {
        "id": "cal",
        "kind": "google_calendar",
        "agent": "ana",
        "schedule": {"every_secs": 60},
        "config": {"deliver": {"channel": "log", "to": "ops"}},
    }
    cfg.write([job], agents={"ana": {"log": {}, "google": binding}})
    cfg.reload()
    google.put_event("a")
    assert tick_job("cal", now=timezone.now()).status == "ok"  # the baseline
    assert not PollState.objects.get(job_id="cal").notice
    google.put_event("b")  # never delivered: the re-baseline skips it
    google.expire_sync_tokens()
    assert tick_job("cal", now=timezone.now()).status == "ok"
    return PollState.objects.get(job_id="cal")


def test_a_410_rebaseline_is_a_notice_on_the_status(cfg, google, tmp_path, capsys):
    before = timezone.now()
    state = rebaselined(cfg, google, tmp_path)
    assert "410" in state.notice and "not delivered" in state.notice
    assert before <= state.notice_at <= timezone.now()
    assert state.last_status == "ok" and not state.paused
    view = services.show_job("cal", now=timezone.now())
    assert view["notice"] == state.notice and view["notice_at"] == state.notice_at.isoformat()
    call_command("pollers", "list")
    out = capsys.readouterr().out
    assert f"notice cal {state.notice_at.isoformat()[:19]}: " in out and "410" in out
    # the notice stays until an operator resets the job
    assert tick_job("cal", now=timezone.now()).status == "ok"
    assert PollState.objects.get(job_id="cal").notice == state.notice
    services.reset_job("cal")
    assert PollState.objects.get(job_id="cal").notice == ""
