"""Validation limits equal what the DB holds: a job at every maximum ticks and commits.

Runs on SQLite in `make test` and on PostgreSQL in `make test-pg`; PostgreSQL is the one
that refuses a string longer than its column, so that run is the one that matters.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from nexopoll.core import limits
from nexopoll.models import Agent, Delivery, PollJob, PollState
from nexopoll.runtime.tick import tick_job

from .conftest import scripted

JOB = "j" * limits.MAX_JOB_ID
AGENT = "a" * limits.MAX_AGENT_ID


def longest_job(to: str = "r" * 500, alert_to: str = "f" * 500) -> dict:
    return scripted(
        JOB,
        agent=AGENT,
        config={"deliver": {"channel": "log", "to": to}},
        failure_to={"channel": "log", "to": alert_to},
    )


@pytest.mark.parametrize(
    "model, field, limit",
    [
        (PollJob, "job_id", limits.MAX_JOB_ID),
        (PollJob, "kind", limits.MAX_KIND),
        (PollJob, "agent", limits.MAX_AGENT_ID),
        (PollState, "job_id", limits.MAX_JOB_ID),
        (Agent, "agent_id", limits.MAX_AGENT_ID),
        (Delivery, "job_id", limits.MAX_JOB_ID),
        (Delivery, "agent", limits.MAX_AGENT_ID),
        (Delivery, "channel", limits.MAX_CHANNEL),
        (Delivery, "recipient", limits.MAX_RECIPIENT),
    ],
)
def test_columns_and_validation_share_one_limit(model, field, limit):
    column = model._meta.get_field(field)  # a relation's column is its target's
    assert getattr(column, "target_field", column).max_length == limit


def test_a_job_at_every_maximum_length_ticks_and_commits_its_outbox_rows(cfg, redis_client):
    cfg.write([longest_job()], agents={AGENT: {"log": {}}})
    res = cfg.reload()
    assert res.issues == [] and res.add == [JOB]
    redis_client.rpush(f"test:src:{JOB}", 1, 2)

    report = tick_job(JOB, now=timezone.now())
    assert (report.status, report.committed) == ("ok", True)
    items = Delivery.objects.filter(job_id=JOB, purpose="item")
    assert sorted(r.payload["item_id"] for r in items) == [1, 2]
    assert {(r.agent, r.channel, r.recipient) for r in items} == {(AGENT, "log", "r" * 500)}
    assert bytes(PollState.objects.get(job_id=JOB).cursor) == b"2"

    redis_client.set(f"test:mode:{JOB}", "permanent")
    report = tick_job(JOB, now=timezone.now())
    assert (report.status, report.committed) == ("permanent", True)
    alert = Delivery.objects.get(job_id=JOB, purpose="alert")
    assert (alert.agent, alert.recipient) == (AGENT, "f" * 500)
    state = PollState.objects.get(job_id=JOB)
    assert state.paused and "scripted permanent failure" in state.last_error


@pytest.mark.parametrize(
    "job, path",
    [
        (longest_job(alert_to="f" * 501), "failure_to.to"),
        (longest_job(alert_to="f" * 2000), "failure_to.to"),
        ({**longest_job(), "failure_to": {"channel": "c" * 65, "to": "x"}}, "failure_to.channel"),
    ],
)
def test_one_past_a_column_is_rejected_at_load_and_the_last_good_one_kept(cfg, job, path):
    cfg.write([longest_job()], agents={AGENT: {"log": {}}})
    cfg.reload()
    cfg.write([job], agents={AGENT: {"log": {}}})
    res = cfg.reload()
    assert res.kept_invalid == [JOB]
    [issue] = res.issues
    lines = cfg.path.read_text().splitlines()
    start = lines.index("    failure_to:")
    field = path.split(".")[1]
    line = next(i for i in range(start, len(lines)) if lines[i].strip().startswith(field)) + 1
    assert issue.startswith(f"{cfg.path}:{line}: jobs[{JOB}].{path}: ")
    assert PollJob.objects.get(job_id=JOB).failure_to == {"channel": "log", "to": "f" * 500}
