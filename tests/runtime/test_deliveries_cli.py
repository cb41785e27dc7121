"""`pollers deliveries` and `pollers redeliver`: nothing stays stuck in the outbox."""

from __future__ import annotations

import json
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from nexopoll.models import Delivery
from nexopoll.runtime.delivery import claim
from nexopoll.runtime.tick import tick_job
from tests.support.celeryqueue import queued_deliveries
from tests.support.httpserver import TestHTTPServer, reply, sequence
from tests.support.outbox import outbox_row
from tests.support.procs import ROOT, stack_env

from .conftest import scripted
from .test_delivery import NOW, send


def run(*args: str) -> str:
    out = StringIO()
    call_command("pollers", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def outbox(cfg, redis_client):
    """Job a (webhook): one row sent, two dead; one row held; job b (log): one pending."""
    with TestHTTPServer() as hook:
        hook.route("POST", "/hook", sequence(200, 400))
        agents = {
            "ana": {
                "log": {},
                "webhook": {"url": hook.url("/hook"), "allow_private_networks": True},
            }
        }
        cfg.write(
            [scripted("a", config={"deliver": {"channel": "webhook", "to": "ops"}}), scripted("b")],
            agents=agents,
        )
        cfg.reload()
        redis_client.rpush("test:src:a", 1, 2, 3)
        redis_client.rpush("test:src:b", 1)
        sent, dead1, dead2 = tick_job("a", now=NOW).delivery_ids
        (pending,) = tick_job("b", now=NOW).delivery_ids
        held = str(
            outbox_row(
                "a",
                at=NOW,
                purpose="alert",
                channel="pager",
                recipient="#ops",
                payload={"text": "x"},
            ).id
        )
        outcomes = send([sent, dead1, dead2, held], NOW)
        assert list(outcomes.values()) == ["sent", "dead", "dead", "held"]
        hook.route("POST", "/hook", reply(200))  # the receiver is fixed
        yield {"sent": sent, "dead": [dead1, dead2], "held": held, "pending": pending, "hook": hook}


def status_of(*ids: str) -> list[tuple[str, int]]:
    rows = {str(r.id): r for r in Delivery.objects.filter(id__in=ids)}
    return [(rows[i].status, rows[i].attempts) for i in ids]


def test_deliveries_lists_rows_with_filters_as_a_table_and_as_json(outbox):
    table = run("deliveries")
    head = table.splitlines()[0].split()
    assert head[:5] == ["ID", "JOB", "CHANNEL", "RECIPIENT", "STATUS"] and "ERROR" in head
    for row_id in [outbox["sent"], *outbox["dead"], outbox["held"], outbox["pending"]]:
        assert row_id in table
    dead = run("deliveries", "--status", "dead")
    assert all(i in dead for i in outbox["dead"]) and outbox["sent"] not in dead
    assert "HTTP 400" in dead
    held = json.loads(run("deliveries", "--status", "held", "--json"))
    assert [(d["id"], d["channel"], d["status"]) for d in held] == [
        (outbox["held"], "pager", "held")
    ]
    assert "unknown channel 'pager'" in held[0]["last_error"]
    assert held[0]["attempts"] == 0 and held[0]["next_attempt_at"]
    only_b = json.loads(run("deliveries", "--job", "b", "--json"))
    assert [(d["id"], d["status"]) for d in only_b] == [(outbox["pending"], "pending")]
    assert set(only_b[0]) >= {
        "id",
        "job_id",
        "channel",
        "recipient",
        "status",
        "attempts",
        "next_attempt_at",
        "last_error",
        "created_at",
        "sent_at",
        "enqueued_at",
    }
    assert "payload" not in only_b[0]
    limited = run("deliveries", "--limit", "2")
    assert "raise --limit" in limited and len(limited.strip().splitlines()) == 4
    assert "(no deliveries)" in run("deliveries", "--job", "nobody")


def test_deliveries_rejects_a_bad_status_or_limit(outbox):
    with pytest.raises(CommandError, match="invalid choice: 'stuck'"):
        run("deliveries", "--status", "stuck")
    with pytest.raises(CommandError, match="limit must be between 1 and 10000"):
        run("deliveries", "--limit", "0")


def test_redeliver_ids_moves_dead_and_held_rows_back_and_queues_them(outbox, redis_client):
    dead1, dead2 = outbox["dead"]
    before = queued_deliveries(redis_client)
    out = run("redeliver", dead1, outbox["held"])
    assert "requeued 2 row(s)" in out and dead1 in out
    assert status_of(dead1, outbox["held"], dead2) == [("pending", 0), ("pending", 0), ("dead", 1)]
    after = queued_deliveries(redis_client)
    assert after[dead1] == before[dead1] + 1 and after[outbox["held"]] == before[outbox["held"]] + 1
    assert send([dead1], timezone.now()) == {dead1: "sent"}
    last = outbox["hook"].requests[-1]
    assert last.header("X-Nexopoll-Delivery-Id") == dead1  # the same delivery id as before


def test_redeliver_job_dead_takes_every_dead_row_of_that_job_only(outbox):
    dead1, dead2 = outbox["dead"]
    requeued = json.loads(run("redeliver", "--job", "a", "--dead", "--json"))["requeued"]
    assert sorted(requeued) == sorted([dead1, dead2])
    assert status_of(dead1, dead2) == [("pending", 0), ("pending", 0)]
    assert status_of(outbox["held"], outbox["sent"], outbox["pending"]) == [
        ("held", 0),
        ("sent", 1),
        ("pending", 0),
    ]
    run("redeliver", "--job", "a", "--held")
    assert status_of(outbox["held"]) == [("pending", 0)]


def test_a_sent_row_is_refused_unless_forced_and_then_resent_under_its_id(outbox):
    sent = outbox["sent"]
    with pytest.raises(CommandError, match=f"already sent: {sent}.*--force"):
        run("redeliver", sent)
    assert status_of(sent) == [("sent", 1)]
    run("redeliver", sent, "--force")
    assert status_of(sent) == [("pending", 0)]
    assert send([sent], timezone.now()) == {sent: "sent"}
    ids = [r.header("X-Nexopoll-Delivery-Id") for r in outbox["hook"].requests]
    assert ids.count(sent) == 2


def test_unknown_ids_exit_with_one_line_and_change_nothing(outbox):
    dead1 = outbox["dead"][0]
    missing = "00000000-0000-4000-8000-000000000000"
    with pytest.raises(CommandError) as err:
        run("redeliver", dead1, "nope", missing)
    assert str(err.value) == f"unknown delivery id(s): {missing}, nope"
    assert status_of(dead1) == [("dead", 1)]  # all or nothing


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give delivery ids, or --job ID"),
        (("--job", "a"), "--job needs --dead and/or --held"),
        (("--job", "zz", "--dead"), "unknown job 'zz'"),
        (("X", "--dead"), "not with row ids"),
    ],
)
def test_redeliver_argument_errors(outbox, args, message):
    with pytest.raises(CommandError, match=message):
        run("redeliver", *args)


def test_a_row_being_sent_is_not_reset_under_its_sender(outbox):
    pending = outbox["pending"]
    assert claim(pending, now=timezone.now())
    with pytest.raises(CommandError, match=f"being sent right now: {pending}"):
        run("redeliver", pending)
    assert status_of(pending) == [("pending", 1)]


def database_url() -> str:
    s = connection.settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        return "sqlite:///" + str(Path(s["NAME"]).resolve())
    return f"postgres://{s.get('USER') or 'postgres'}@{s.get('HOST') or '127.0.0.1'}:" + (
        f"{s.get('PORT') or 5432}/{s['NAME']}"
    )


def test_the_console_script_lists_and_redelivers(outbox, redis_server, cfg):
    env = stack_env(redis_server.url, database_url(), str(cfg.path))
    cli = [sys.executable, "-m", "nexopoll.cli"]

    def script(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*cli, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )

    listed = script("deliveries", "--status", "dead", "--json")
    assert listed.returncode == 0, listed.stderr
    assert sorted(d["id"] for d in json.loads(listed.stdout)) == sorted(outbox["dead"])
    refused = script("redeliver", "nope")
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == ["CommandError: unknown delivery id(s): nope"]
    done = script("redeliver", "--job", "a", "--dead")
    assert done.returncode == 0 and "requeued 2 row(s)" in done.stdout
    assert status_of(*outbox["dead"]) == [("pending", 0), ("pending", 0)]
