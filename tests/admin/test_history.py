"""Tick history beside the lease in Redis, and rewind to a past tick's cursor."""

from __future__ import annotations

import json
import re

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from nexopoll import services
from nexopoll.models import PollState
from nexopoll.runtime import history, lease
from nexopoll.runtime.tick import tick_job

from .conftest import scripted

A, B = "a_1.x-y", "b_2.y-z"  # ids with every character a job id may have besides letters


def _tick(job_id: str):
    return tick_job(job_id, now=timezone.now())


def test_each_tick_appends_an_entry_with_its_start_cursor(cfg, redis_client):
    cfg.write([scripted(A)])
    cfg.reload()
    redis_client.rpush(f"test:src:{A}", 1, 2)
    _tick(A)
    redis_client.rpush(f"test:src:{A}", 3)
    _tick(A)
    entries = services.tick_history(A)
    assert [e.n for e in entries] == [2, 1]
    assert [(e.status, e.seen, e.dispatched) for e in entries] == [("ok", 3, 1), ("ok", 2, 2)]
    assert all(e.ms is not None and e.epoch for e in entries)
    # tick 2 started from the cursor tick 1 committed; tick 1 from none
    assert history.start_cursor(redis_client, A, 2)[1] == b"2"
    assert history.start_cursor(redis_client, A, 1)[1] is None
    assert not redis_client.exists(lease.lease_key(A))  # released in the same pipeline


def test_history_is_capped_and_orphan_cursors_are_dropped(cfg, redis_client):
    cfg.write([scripted(A)])
    cfg.reload()
    for i in range(history.HISTORY_LEN + 30):
        redis_client.rpush(f"test:src:{A}", i + 1)
        _tick(A)
    entries = services.tick_history(A)
    assert len(entries) == history.HISTORY_LEN
    assert entries[0].n == history.HISTORY_LEN + 30 and entries[-1].n == 31
    assert redis_client.hlen(history.cursors_key(A)) <= history.HISTORY_LEN + 21


def test_skipped_and_failed_ticks_are_recorded(cfg, redis_client):
    cfg.write([scripted(A, paused_on_boot=True), scripted(B)])
    cfg.reload()
    _tick(A)
    redis_client.set(f"test:mode:{B}", "transient")
    _tick(B)
    assert [(e.status, e.reason) for e in services.tick_history(A)] == [("skipped", "paused")]
    (entry,) = services.tick_history(B)
    assert entry.status == "transient" and entry.error


def test_rewind_restores_the_start_cursor_and_fences_running_ticks(cfg, redis_client):
    cfg.write([scripted(A)])
    cfg.reload()
    for batch in ([1, 2], [3], [4, 5]):
        redis_client.rpush(f"test:src:{A}", *batch)
        _tick(A)
    before = PollState.objects.get(job_id=A)
    assert bytes(before.cursor) == b"5"
    done = services.rewind_job(A, tick=2)
    after = PollState.objects.get(job_id=A)
    assert done.cursor == b"2" and bytes(after.cursor) == b"2"
    assert after.epoch == before.epoch + 1  # a tick that read the old row cannot commit
    report = _tick(A)  # replays the window after tick 1
    assert report.status == "ok" and report.items_dispatched == 3


def test_rewind_refuses_unknown_and_skipped_ticks(cfg, redis_client):
    cfg.write([scripted(A, paused_on_boot=True)])
    cfg.reload()
    _tick(A)
    with pytest.raises(LookupError, match="skipped"):
        services.rewind_job(A, tick=1)
    with pytest.raises(LookupError, match="not in its history"):
        services.rewind_job(A, tick=99)


def test_cli_history_preview_and_rewind(cfg, redis_client, capsys):
    cfg.write([scripted(A, schedule={"cron": "0 30 2 * * *", "tz": "Europe/Paris"})])
    cfg.reload()
    redis_client.rpush(f"test:src:{A}", 7)
    _tick(A)
    redis_client.rpush(f"test:src:{A}", 8)
    _tick(A)
    call_command("pollers", "history", A, "--json")
    rows = json.loads(capsys.readouterr().out)
    assert [r["n"] for r in rows] == [2, 1] and rows[0]["status"] == "ok"
    call_command("pollers", "preview", A, "--count", "3")
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and all(
        "UTC" in line and ("CET" in line or "CEST" in line) for line in out
    )
    with pytest.raises(CommandError, match="--yes"):
        call_command("pollers", "rewind", A, "--to", "2")
    call_command("pollers", "rewind", A, "--to", "2", "--yes")
    assert f"rewound {A} to tick #2" in capsys.readouterr().out
    assert bytes(PollState.objects.get(job_id=A).cursor) == b"7"
    with pytest.raises(CommandError, match="not in its history"):
        call_command("pollers", "rewind", A, "--to", "50", "--yes")


def test_cli_dry_run_with_nothing_new_says_the_cursor_is_unchanged(cfg, redis_client, capsys):
    cfg.write([scripted(A)])
    cfg.reload()
    redis_client.rpush(f"test:src:{A}", 4)
    _tick(A)
    capsys.readouterr()
    call_command("pollers", "run", A, "--dry-run")
    out = capsys.readouterr().out
    assert "next cursor: unchanged (4)" in out and "None" not in out


def test_cli_list_names_the_time_zone_and_help_lists_every_verb(cfg, capsys):
    cfg.write([scripted(A)])
    cfg.reload()
    call_command("pollers", "list")
    header = capsys.readouterr().out.splitlines()[0]
    assert "LAST RUN (UTC)" in header and "NEXT (UTC)" in header
    import subprocess
    import sys

    from tests.support.procs import ROOT

    helptext = subprocess.run(
        [sys.executable, "-c", "from nexopoll.cli import main; main(['--help'])"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert helptext.startswith("usage: nexopoll ")
    for verb in (
        "list",
        "show",
        "run",
        "pause",
        "resume",
        "reset",
        "reload",
        "check",
        "preview",
        "history",
        "rewind",
    ):
        assert re.search(rf"^\s+{verb}\s+\S", helptext, re.M), verb
