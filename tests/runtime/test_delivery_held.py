"""A configuration problem at send time holds an outbox row; it never kills it.

Each variant commits a row through a real tick (or, for a channel this build does
not have, finds it committed), sends it through the real delivery path, checks it
is held with its reason (secrets masked) and that no number of attempts or
sweeps dead-letters it, then fixes the configuration and reloads: the reload puts
held rows back to pending and queues them, and the row is sent.
"""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from nexopoll import services
from nexopoll.models import Delivery
from nexopoll.runtime import outbox
from nexopoll.runtime.delivery import HOLD_RETRY, dead_letter_exhausted, due_rows
from nexopoll.runtime.tick import tick_job
from tests.support.celeryqueue import queued_deliveries
from tests.support.httpserver import TestHTTPServer, reply
from tests.support.outbox import outbox_row

from .conftest import scripted
from .test_delivery import NOW, send

CANARY = "tok-CANARY-held-5150"


def webhook_job() -> dict:
    return scripted("a", config={"deliver": {"channel": "webhook", "to": "ops"}})


def hook_agent(url: str, **extra) -> dict:
    return {"ana": {"webhook": {"url": url, "allow_private_networks": True, **extra}}}


def commit_row(cfg, redis_client) -> str:
    redis_client.rpush("test:src:a", 1)
    (row_id,) = tick_job("a", now=NOW).delivery_ids
    return row_id


# Each variant: set up and commit a row, break the configuration, then fix it.
def agent_removed(cfg, redis_client, url, monkeypatch) -> str:
    cfg.write([webhook_job()], agents=hook_agent(url))
    cfg.reload()
    row_id = commit_row(cfg, redis_client)
    cfg.write([], agents={"someone_else": {"log": {}}})  # the job and its agent removed
    cfg.reload()
    return row_id


def agent_restored(cfg, url, monkeypatch) -> None:
    cfg.write([webhook_job()], agents=hook_agent(url))


def env_var_missing_in_worker(cfg, redis_client, url, monkeypatch) -> str:
    monkeypatch.setenv("HOOK_SECRET", CANARY)
    cfg.write([webhook_job()], agents=hook_agent(url, secret="${HOOK_SECRET}"))
    cfg.reload()
    row_id = commit_row(cfg, redis_client)
    monkeypatch.delenv("HOOK_SECRET")  # the worker was started without it
    return row_id


def env_var_set(cfg, url, monkeypatch) -> None:
    monkeypatch.setenv("HOOK_SECRET", CANARY)


def binding_missing(cfg, redis_client, url, monkeypatch) -> str:
    """A reload drops the binding after the row was committed (a job that delivers to
    a channel its agent has no binding for is refused at load: it keeps its last good
    definition, and the agent loses the binding)."""
    cfg.write([webhook_job()], agents=hook_agent(url))
    cfg.reload()
    row_id = commit_row(cfg, redis_client)
    cfg.write([webhook_job()], agents={"ana": {"log": {}}})  # no webhook binding
    cfg.reload()
    return row_id


def binding_added(cfg, url, monkeypatch) -> None:
    cfg.write([webhook_job()], agents=hook_agent(url))


def url_refused_by_the_channel(cfg, redis_client, url, monkeypatch) -> str:
    """The webhook channel raises ConfigError: a loopback URL without the opt-in,
    its path carrying a secret that must not reach the error text."""
    monkeypatch.setenv("HOOK_TOKEN", CANARY)
    cfg.write([webhook_job()], agents={"ana": {"webhook": {"url": url + "/${HOOK_TOKEN}"}}})
    cfg.reload()
    return commit_row(cfg, redis_client)


def private_networks_allowed(cfg, url, monkeypatch) -> None:
    cfg.write([webhook_job()], agents=hook_agent(url + "/${HOOK_TOKEN}"))


def unknown_channel(cfg, redis_client, url, monkeypatch) -> str:
    """A row for a channel this build does not have (a failure_to channel that was
    only spell-checked, or a plugin uninstalled since the row was committed)."""
    cfg.write([webhook_job()], agents=hook_agent(url))
    cfg.reload()
    row = outbox_row(
        "a",
        at=NOW,
        purpose="alert",
        channel="pager",
        recipient="#ops",
        payload={"text": "poller a failing"},
    )
    return str(row.id)


def channel_fixed(cfg, url, monkeypatch) -> None:
    """The operator re-points the stuck alert at a channel that exists."""
    Delivery.objects.filter(channel="pager").update(channel="webhook")


VARIANTS = {
    "agent removed by a reload": (agent_removed, agent_restored, "'ana' is not declared"),
    "env var missing in the worker": (
        env_var_missing_in_worker,
        env_var_set,
        "environment variable HOOK_SECRET is not set",
    ),
    "binding missing": (binding_missing, binding_added, "no webhook binding"),
    "channel raises ConfigError": (
        url_refused_by_the_channel,
        private_networks_allowed,
        "webhook binding",
    ),
    "unknown channel": (unknown_channel, channel_fixed, "unknown channel 'pager'"),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_config_problem_holds_the_row_until_a_reload_fixes_it(
    variant, cfg, redis_client, monkeypatch, settings, caplog
):
    settings.NEXOPOLL_DELIVERY_MAX_ATTEMPTS = 2
    settings.NEXOPOLL_CONFIG = str(cfg.path)
    breaks, fix, reason = VARIANTS[variant]
    with TestHTTPServer() as hook:
        hook.route("POST", "/hook", reply(200)).route("POST", f"/hook/{CANARY}", reply(200))
        url = hook.url("/hook")
        row_id = breaks(cfg, redis_client, url, monkeypatch)

        assert send([row_id], NOW) == {row_id: "held"}
        row = Delivery.objects.get(id=row_id)
        assert row.status == "held" and reason in row.last_error
        assert row.attempts == 0 and row.claimed_until is None  # the attempt did not count
        assert hook.hits() == 0

        # more attempts than the dead-letter cap, through reloads and sweeps: still held
        for _ in range(3):
            cfg.reload()  # a reload retries held rows at once (the reload's clock)
            assert Delivery.objects.get(id=row_id).status == "pending"
            assert send([row_id], timezone.now()) == {row_id: "held"}
            outbox.sweep(now=timezone.now())
            assert dead_letter_exhausted(now=timezone.now() + timedelta(days=1)) == 0
        row = Delivery.objects.get(id=row_id)
        assert (row.status, row.attempts) == ("held", 0)
        assert row_id not in due_rows(now=timezone.now() + timedelta(minutes=2))  # no hot loop

        # visible to operators, with the reason and no secret
        listed = services.list_deliveries(status="held")
        assert [(d["id"], d["status"]) for d in listed] == [(row_id, "held")]
        assert reason in listed[0]["last_error"]
        table = StringIO()
        call_command("pollers", "deliveries", "--status", "held", stdout=table)
        assert row_id in table.getvalue() and "held" in table.getvalue()
        for text in (row.last_error, caplog.text, json.dumps(listed), table.getvalue()):
            assert CANARY not in text

        # fixed and reloaded: back to pending, queued at once, then sent
        fix(cfg, url, monkeypatch)
        queued_before = queued_deliveries(redis_client)[row_id]
        cfg.reload()
        row = Delivery.objects.get(id=row_id)
        assert row.status == "pending" and row.enqueued_at is not None
        assert queued_deliveries(redis_client)[row_id] == queued_before + 1
        assert send([row_id], timezone.now()) == {row_id: "sent"}
        assert hook.hits() == 1 and hook.requests[0].header("X-Nexopoll-Delivery-Id") == row_id
        row = Delivery.objects.get(id=row_id)
        assert (row.status, row.attempts, row.last_error) == ("sent", 1, "")


def test_a_held_row_is_retried_periodically_without_a_reload(cfg, redis_client, monkeypatch):
    """The worker's environment may be fixed by a restart alone: the sweeper retries
    held rows every HOLD_RETRY."""
    with TestHTTPServer() as hook:
        hook.route("POST", "/hook", reply(200))
        row_id = env_var_missing_in_worker(cfg, redis_client, hook.url("/hook"), monkeypatch)
        assert send([row_id], NOW) == {row_id: "held"}
        early = outbox.sweep(now=NOW + HOLD_RETRY - timedelta(seconds=1))
        assert early["released"] == 0
        assert Delivery.objects.get(id=row_id).status == "held"
        monkeypatch.setenv("HOOK_SECRET", CANARY)  # the worker restarted with it
        before = queued_deliveries(redis_client)[row_id]
        swept = outbox.sweep(now=NOW + HOLD_RETRY)
        assert swept["released"] == 1 and swept["queued"] == 1
        assert queued_deliveries(redis_client)[row_id] == before + 1
        assert send([row_id], NOW + HOLD_RETRY) == {row_id: "sent"}
        assert hook.requests[0].header("X-Nexopoll-Signature").startswith("sha256=")


def test_a_transient_failure_is_still_retried_and_a_permanent_one_still_dead(cfg, redis_client):
    """Holding is for configuration problems only: the receiver's own answers keep their
    classes."""
    with TestHTTPServer() as hook:
        hook.route("POST", "/hook", reply(503))
        cfg.write([webhook_job()], agents=hook_agent(hook.url("/hook")))
        cfg.reload()
        row_id = commit_row(cfg, redis_client)
        assert send([row_id], NOW) == {row_id: "retry"}
        hook.route("POST", "/hook", reply(404))
        row = Delivery.objects.get(id=row_id)
        assert send([row_id], row.next_attempt_at) == {row_id: "dead"}
