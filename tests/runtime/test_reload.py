"""Reload: validate everything, apply {add, replace, remove, keep}, sync RedBeat."""

from __future__ import annotations

import pytest
from django.utils import timezone

from nexopoll import services
from nexopoll.core.config import ConfigFileError
from nexopoll.models import PollJob, PollState
from nexopoll.runtime import keys
from nexopoll.runtime.tick import tick_job

from .conftest import scripted


def entries(redis_client) -> set[str]:
    return set(redis_client.zrange(keys.schedule_key(), 0, -1))


def test_reload_plan_add_replace_remove_keep_and_redbeat_sync(cfg, redis_client):
    cfg.write([scripted("keep"), scripted("change"), scripted("gone")])
    first = cfg.reload()
    assert first.add == ["change", "gone", "keep"] and first.applied
    assert entries(redis_client) == {keys.entry_key(i) for i in ("keep", "change", "gone")}
    redis_client.rpush("test:src:keep", 1)
    tick_job("keep", now=timezone.now())
    cfg.write([scripted("keep"), scripted("change", every=30), scripted("new")])
    plan = cfg.reload(dry_run=True)
    assert (plan.add, plan.replace, plan.remove, plan.keep) == (
        ["new"],
        ["change"],
        ["gone"],
        ["keep"],
    )
    assert not plan.applied and PollJob.objects.filter(job_id="gone").exists()
    res = cfg.reload()
    assert res.applied and (res.add, res.replace, res.remove, res.keep) == plan_tuple(plan)
    assert set(PollJob.objects.values_list("job_id", flat=True)) == {"keep", "change", "new"}
    assert entries(redis_client) == {keys.entry_key(i) for i in ("keep", "change", "new")}
    # kept jobs keep cursor and state
    assert bytes(PollState.objects.get(job_id="keep").cursor) == b"1"
    assert PollJob.objects.get(job_id="change").schedule == {"every_secs": 30.0}
    # a removed job no longer ticks; its state is kept for a later re-add
    assert tick_job("gone", now=timezone.now()).reason == "unknown job"


def plan_tuple(plan):
    return (plan.add, plan.replace, plan.remove, plan.keep)


def test_invalid_new_definition_keeps_the_last_good_one(cfg, redis_client):
    cfg.write([scripted("a"), scripted("b")])
    cfg.reload()
    before = PollJob.objects.get(job_id="a").definition_hash
    cfg.write([scripted("a", schedule={"cron": "61 * * * *"}), scripted("b", every=10)])
    res = cfg.reload()
    assert res.kept_invalid == ["a"] and res.replace == ["b"] and res.remove == []
    assert any("jobs[a].schedule" in i and "cron" in i for i in res.issues)
    assert PollJob.objects.get(job_id="a").definition_hash == before
    assert keys.entry_key("a") in entries(redis_client)


def test_strict_refuses_the_whole_reload(cfg):
    cfg.write([scripted("a")])
    cfg.reload()
    cfg.write([scripted("a", every=5), scripted("bad", kind="rsss")])
    with pytest.raises(services.ReloadRefused) as err:
        cfg.reload(strict=True)
    assert "rsss" in str(err.value) and "scripted" in str(err.value)
    assert PollJob.objects.get(job_id="a").schedule == {"every_secs": 60.0}


def test_malformed_file_applies_nothing_and_names_the_line(cfg):
    cfg.write([scripted("a")])
    cfg.reload()
    cfg.write_text("pollers:\n  jobs:\n    - id: a\n      kind: [unclosed\n")
    with pytest.raises(ConfigFileError) as err:
        cfg.reload()
    assert ":4" in str(err.value) or ":5" in str(err.value)
    assert PollJob.objects.filter(job_id="a").exists()


def test_paused_on_boot_is_persisted_once_not_on_every_reload(cfg):
    cfg.write([scripted("a", paused_on_boot=True)])
    cfg.reload()
    assert PollState.objects.get(job_id="a").paused
    services.resume_job("a")
    cfg.reload()  # kept: the operator's resume stands
    assert not PollState.objects.get(job_id="a").paused
