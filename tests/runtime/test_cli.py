"""The `pollers` management command and the `nexopoll` console script."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from nexopoll.models import PollState
from nexopoll.runtime.registry import DuplicateKindError, Registry
from tests.support.testpollers import ScriptedPoller

from .conftest import scripted


def run(*args: str) -> str:
    out = StringIO()
    call_command("pollers", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_list_show_and_dry_run_as_json(cfg, redis_client):
    cfg.write([scripted("a"), scripted("b", paused_on_boot=True)])
    cfg.reload()
    redis_client.rpush("test:src:a", 4, 5)
    jobs = json.loads(run("list", "--json"))
    assert [(j["id"], j["paused"]) for j in jobs] == [("a", False), ("b", True)]
    dry = json.loads(run("run", "a", "--dry-run", "--json"))
    assert dry["next_cursor"] == "5" and len(dry["deliveries"]) == 2 and not dry["committed"]
    assert PollState.objects.get(job_id="a").cursor is None
    real = json.loads(run("run", "a", "--json"))
    assert real["committed"] and len(real["delivery_ids"]) == 2
    shown = json.loads(run("show", "a", "--json"))
    assert shown["cursor"] == "5" and shown["config"]["deliver"]["channel"] == "log"
    assert "a " in run("list") and "KIND" in run("list")


def test_pause_resume_reset_and_errors(cfg):
    cfg.write([scripted("a")])
    cfg.reload()
    run("pause", "a")
    assert PollState.objects.get(job_id="a").paused
    run("resume", "a")
    assert not PollState.objects.get(job_id="a").paused
    with pytest.raises(CommandError, match="--yes"):
        run("reset", "a")
    with pytest.raises(CommandError, match="unknown job 'nope'"):
        run("show", "nope")
    with pytest.raises(CommandError, match="unknown job"):
        run("run", "nope")


def test_reload_dry_run_prints_the_plan_and_strict_fails(cfg, settings):
    settings.NEXOPOLL_CONFIG = str(cfg.path)
    cfg.write([scripted("a"), scripted("bad", kind="rsss")])
    out = StringIO()
    with pytest.raises(CommandError, match="1 problem"):  # the plan is printed, exit 1
        call_command("pollers", "reload", "--dry-run", stdout=out, stderr=StringIO())
    assert "add" in out.getvalue() and "a" in out.getvalue()
    with pytest.raises(CommandError, match="rsss"):
        run("reload", "--strict")


def test_duplicate_kinds_fail_loudly():
    reg = Registry()
    reg.register(ScriptedPoller(), "first")
    with pytest.raises(DuplicateKindError, match="'scripted' is registered twice: by first"):
        reg.register(ScriptedPoller(), "second")


def test_console_script_runs_the_same_commands(cfg, settings, capsys):
    from nexopoll.cli import main

    settings.NEXOPOLL_CONFIG = str(cfg.path)
    cfg.write([scripted("a")])
    main(["reload"])
    main(["list", "--json"])
    out = capsys.readouterr().out
    assert '"id": "a"' in out and "add" in out


def test_check_refuses_a_redis_that_may_evict_schedule_keys(cfg, settings, redis_client):
    """RELIABILITY row 15: leases, RedBeat entries and queued ticks must not be evicted."""
    settings.NEXOPOLL_CONFIG = str(cfg.path)
    cfg.write([scripted("a")])
    assert "ok:" in run("check")
    redis_client.config_set("maxmemory", "2mb")
    redis_client.config_set("maxmemory-policy", "volatile-lru")
    try:
        with pytest.raises(CommandError, match="1 problem"):
            run("check")
    finally:
        redis_client.config_set("maxmemory", "0")
        redis_client.config_set("maxmemory-policy", "noeviction")


def test_check_reports_config_errors_with_their_line(cfg, settings):
    settings.NEXOPOLL_CONFIG = str(cfg.path)
    cfg.write_text(
        "pollers:\n  jobs:\n    - id: a\n      kind: rsss\n      agent: x\n"
        "      schedule: {every_secs: 5}\n"
    )
    err = StringIO()
    with pytest.raises(CommandError):
        call_command("pollers", "check", stdout=StringIO(), stderr=err)
    assert "pollers.yaml:4" in err.getvalue() and "rsss" in err.getvalue()


def test_run_refuses_a_paused_job_unless_forced(cfg, redis_client):
    cfg.write([scripted("a")])
    cfg.reload()
    redis_client.rpush("test:src:a", 7)
    run("pause", "a")
    with pytest.raises(CommandError, match=r"job 'a' is paused \(paused by operator\).*--force"):
        run("run", "a")
    assert PollState.objects.get(job_id="a").cursor is None
    assert redis_client.get("test:ticks:a") is None
    from nexopoll.tasks import run_now  # the admin's "run now" refuses it too

    refused = run_now("a")
    assert refused["status"] == "paused" and "--force" in refused["error"]
    assert not refused["committed"] and redis_client.get("test:ticks:a") is None
    forced = json.loads(run("run", "a", "--force", "--json"))
    assert forced["status"] == "ok" and forced["committed"] and forced["next_cursor"] == "7"
    assert bytes(PollState.objects.get(job_id="a").cursor) == b"7"


SECRET = "Sup3rS3cretCliT0ken4711"


def test_show_and_run_never_print_a_secret_value(cfg, redis_client, monkeypatch):
    """The value of a ``${VAR}`` the job's config references is masked in everything
    ``show`` and ``run`` print, even where a poller echoes it (a recipient, an error)."""
    monkeypatch.setenv("NP_CLI_TOKEN", SECRET)
    config = {"token": "${NP_CLI_TOKEN}", "deliver": {"channel": "log", "to": "ops"}}
    cfg.write([scripted("a", config=config)])
    cfg.reload()
    redis_client.set("test:recipient:a", f"ops-{SECRET}")  # a poller echoing its secret
    redis_client.rpush("test:src:a", 1, 2)
    printed = [
        run("run", "a", "--dry-run"),
        run("run", "a", "--dry-run", "--json"),
        run("run", "a", "--json"),
        run("show", "a"),
        run("show", "a", "--json"),
    ]
    dry = json.loads(printed[1])
    assert [d["to"] for d in dry["deliveries"]] == ["ops-***"] * 2  # masked, not dropped
    assert json.loads(printed[4])["config"]["token"] == "${NP_CLI_TOKEN}"
    redis_client.set("test:mode:a", "raise")
    redis_client.set("test:raise:a", f"upstream said {SECRET}")
    with pytest.raises(CommandError) as failed:
        run("run", "a")
    printed += [str(failed.value), run("show", "a"), run("list", "--json")]
    assert "upstream said" in printed[-3]
    for out in printed:
        assert SECRET not in out
