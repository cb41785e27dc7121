"""An invalid pollers.yaml never blocks a management command.

The Django system check only warns; every command (``migrate``, ``pollers list``,
``pollers pause``…) runs, the last good definitions keep running, and ``pollers check``
and ``pollers reload`` report the problems with their file:line and exit non-zero.
"""

from __future__ import annotations

import subprocess
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from nexopoll.models import PollJob, PollState
from tests.support.procs import run_manage, stack_env

from .conftest import scripted

BROKEN = {
    "yaml syntax": ("pollers:\n  jobs:\n    - id: a\n      kind: [scripted\n", 5),
    "duplicate key": ("pollers:\n  enabled: true\n  enabled: false\n", 3),
    "bad settings": ("pollers:\n  breaker_threshold: 0\n", 2),
    "bad job": (
        "pollers:\n  jobs:\n    - id: a\n      kind: scripted\n      agent: ana\n"
        "      schedule: {every_secs: 0.5}\n      config: {deliver: {channel: log, to: x}}\n",
        6,
    ),
}


def run(*args: str, **kw) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err, **kw)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def last_good(cfg, settings):
    settings.NEXOPOLL_CONFIG = str(cfg.path)
    cfg.write([scripted("a")])
    cfg.reload()
    return cfg


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_every_command_runs_with_the_system_checks_on(last_good, case):
    text, line = BROKEN[case]
    last_good.write_text(text)
    # skip_checks=False runs Django's system checks, as `manage.py <command>` does
    run("migrate", "--check", skip_checks=False)
    out, _ = run("pollers", "list", skip_checks=False)
    assert "a " in out
    run("pollers", "pause", "a", skip_checks=False)
    assert PollState.objects.get(job_id="a").paused
    run("pollers", "resume", "a", skip_checks=False)
    assert PollJob.objects.get(job_id="a").schedule == {"every_secs": 60.0}  # last good kept

    err = StringIO()
    with pytest.raises(CommandError):
        call_command("pollers", "check", stdout=StringIO(), stderr=err)
    assert f"{last_good.path}:{line}:" in err.getvalue()
    err = StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("pollers", "reload", stdout=StringIO(), stderr=err)
    assert f"{last_good.path}:{line}:" in str(raised.value) + err.getvalue()
    assert PollJob.objects.get(job_id="a").schedule == {"every_secs": 60.0}


def test_reload_applies_the_valid_jobs_reports_the_others_and_exits_non_zero(last_good):
    last_good.write([scripted("a", every=0.5), scripted("b")])
    err = StringIO()
    with pytest.raises(CommandError, match="1 problem"):
        call_command("pollers", "reload", stdout=StringIO(), stderr=err)
    assert (
        f"{last_good.path}:" in err.getvalue() and "jobs[a].schedule.every_secs" in err.getvalue()
    )
    assert set(PollJob.objects.values_list("job_id", flat=True)) == {"a", "b"}
    assert PollJob.objects.get(job_id="a").schedule == {"every_secs": 60.0}
    with pytest.raises(CommandError, match="1 problem"):
        run("pollers", "reload", "--json")


def test_the_real_cli_works_with_a_broken_file(tmp_path, redis_server):
    config = tmp_path / "pollers.yaml"
    config.write_text(BROKEN["yaml syntax"][0])
    env = stack_env(redis_server.url, f"sqlite:///{tmp_path / 'db.sqlite3'}", str(config))

    def manage(*args: str) -> subprocess.CompletedProcess:
        return run_manage(env, *args)

    migrate = manage("migrate", "--noinput", "-v", "0")
    assert migrate.returncode == 0, migrate.stderr
    assert "nexopoll.W002" in migrate.stderr and f"{config}:5:" in migrate.stderr
    listed = manage("pollers", "list")
    assert listed.returncode == 0, listed.stderr
    assert "no jobs" in listed.stdout
    check = manage("pollers", "check")
    assert check.returncode == 1 and f"{config}:5:" in check.stderr
    reload = manage("pollers", "reload")
    assert reload.returncode == 1 and f"{config}:5:" in reload.stderr
    # reload and check report the file's problems themselves: the system check, which
    # would parse the file a second time, is not run for them
    assert "nexopoll.W002" not in reload.stderr + check.stderr
