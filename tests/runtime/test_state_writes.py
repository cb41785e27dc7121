"""Every operator write to a job's state goes through ``services.write_state``, which
moves the row's epoch: a tick that read the row before cannot commit after it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.utils import timezone

from nexopoll import services
from nexopoll.models import PollState
from nexopoll.runtime.tick import tick_job

from .conftest import scripted

ROOT = Path(__file__).resolve().parents[2]
WRITES = re.compile(r"store\.write_state|UPDATE poll_state|PollState\.objects[^\n]*\.update\(")


def epoch(job_id: str) -> int:
    return PollState.objects.get(job_id=job_id).epoch


VERBS = {
    "pause": lambda: services.pause_job("a"),
    "resume": lambda: services.resume_job("a"),
    "reset": lambda: services.reset_job("a"),
    "rewind": lambda: services.rewind_job("a", tick=1),
}


@pytest.mark.parametrize("verb", list(VERBS))
def test_each_verb_moves_the_epoch(cfg, redis_client, verb):
    cfg.write([scripted("a")])
    cfg.reload()
    assert tick_job("a", now=timezone.now()).status == "ok"  # tick 1 (rewind's target)
    before = epoch("a")
    VERBS[verb]()
    assert epoch("a") == before + 1


def test_a_reload_that_replaces_a_job_moves_its_epoch(cfg, redis_client):
    cfg.write([scripted("a")])
    cfg.reload()
    before = epoch("a")
    cfg.write([scripted("a", every=30)])
    assert cfg.reload().replace == ["a"]
    assert epoch("a") == before + 1


def test_no_front_end_or_service_writes_state_but_through_write_state():
    """Only ``services/jobs.py`` calls the store's writer; nobody updates the rows by hand."""
    writers = []
    for folder in (
        "nexopoll/services",
        "nexopoll/api",
        "nexopoll/llm_tools",
        "nexopoll/management",
        "admin_ext",
    ):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            if re.search(
                r"store\.write_state|UPDATE poll_state|PollState\.objects[^\n]*\.update\(", text
            ):
                writers.append(str(path.relative_to(ROOT)))
    assert writers == ["nexopoll/services/jobs.py"]
