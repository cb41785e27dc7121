"""RELIABILITY rows 20-24 and 50, and the delivery semantics, for every HTTP channel.

Each test commits a real outbox row (scripted job → tick) for one provider channel
whose base URL points at a local server speaking that provider's protocol, then
drives :func:`deliver_rows` with an explicit clock. Email and stream have their
own variants at the end (no redirects or HTTP statuses there).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from nexopoll.models import Delivery, PollState
from nexopoll.runtime.delivery import deliver_rows
from nexopoll.runtime.tick import tick_job
from tests.support.httpserver import TestHTTPServer, json_reply, redirect, sequence
from tests.support.providers import CANARY, HTTP_PROVIDERS, TELEGRAM, point_all

from .conftest import scripted

NOW = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)
by_id = pytest.mark.parametrize("provider", HTTP_PROVIDERS, ids=lambda p: p.id)


def send(ids: list[str], at: datetime) -> dict[str, str]:
    return deliver_rows(ids, clock=lambda: at)


@pytest.fixture
def server(monkeypatch):
    with TestHTTPServer() as srv:
        point_all(monkeypatch, srv)
        yield srv


def commit_row(cfg, redis_client, provider, server, **job) -> str:
    binding = {**provider.binding(server), **provider.fast}
    deliver = {"channel": provider.channel, "to": provider.recipient}
    cfg.write(
        [scripted("a", config={"deliver": deliver}, **job)],
        agents={"ana": {"log": {}, provider.channel: binding}},
    )
    assert cfg.reload().issues == []
    redis_client.rpush("test:src:a", 1)
    (row_id,) = tick_job("a", now=NOW).delivery_ids
    return row_id


def ids_seen(server) -> list[str | None]:
    return [r.header("X-Nexopoll-Delivery-Id") for r in server.requests]


@by_id
def test_fails_twice_then_succeeds_is_delivered_once_under_one_id(
    provider, server, cfg, redis_client
):
    server.route(
        "POST", provider.path, sequence(provider.server_error, provider.server_error, provider.ok)
    )
    row_id = commit_row(cfg, redis_client, provider, server)
    at = NOW
    for expected in ("retry", "retry", "sent"):
        assert send([row_id], at) == {row_id: expected}
        at = Delivery.objects.get(id=row_id).next_attempt_at
    row = Delivery.objects.get(id=row_id)
    assert (row.status, row.attempts, row.last_error) == ("sent", 3, "")
    assert ids_seen(server) == [row_id] * 3
    assert send([row_id], at + timedelta(days=1)) == {row_id: "skipped"}
    assert server.hits() == 3


def hang_up_after_reading(req):
    return lambda raw: None


@by_id
def test_row20_a_lost_answer_is_resent_under_the_same_id_and_sent_once(
    provider, server, cfg, redis_client
):
    server.route("POST", provider.path, sequence(hang_up_after_reading, provider.ok))
    row_id = commit_row(cfg, redis_client, provider, server)
    assert send([row_id], NOW) == {row_id: "retry"}
    later = Delivery.objects.get(id=row_id).next_attempt_at
    assert send([row_id], later) == {row_id: "sent"}
    assert ids_seen(server) == [row_id, row_id]
    assert Delivery.objects.get(id=row_id).status == "sent"


@by_id
def test_row21_a_failing_endpoint_backs_off_then_dead_letters(
    provider, server, cfg, redis_client, settings
):
    settings.NEXOPOLL_DELIVERY_MAX_ATTEMPTS = 4
    server.route("POST", provider.path, provider.server_error)
    row_id = commit_row(cfg, redis_client, provider, server)
    cursor = bytes(PollState.objects.get(job_id="a").cursor)
    at, gaps = NOW, []
    for _ in range(3):
        assert send([row_id], at) == {row_id: "retry"}
        nxt = Delivery.objects.get(id=row_id).next_attempt_at
        gaps.append(nxt - at)
        at = nxt
    assert gaps[0] < gaps[1] < gaps[2]  # exponential
    assert send([row_id], at) == {row_id: "dead"}
    row = Delivery.objects.get(id=row_id)
    assert row.status == "dead" and row.attempts == 4 and provider.channel in row.last_error
    assert bytes(PollState.objects.get(job_id="a").cursor) == cursor


def slow(req):
    return lambda raw: raw.sleep(5)


@by_id
def test_row22_a_slow_endpoint_is_cut_at_the_deadline_and_retried(
    provider, server, cfg, redis_client, settings
):
    settings.NEXOPOLL_DELIVERY_DEADLINE_SECS = 0.5
    server.route("POST", provider.path, slow)
    row_id = commit_row(cfg, redis_client, provider, server)
    started = time.monotonic()
    assert send([row_id], NOW) == {row_id: "retry"}
    assert time.monotonic() - started < 0.5 + 1.0
    assert Delivery.objects.get(id=row_id).next_attempt_at > NOW


@by_id
def test_row23_429_retry_after_is_honoured(provider, server, cfg, redis_client):
    server.route("POST", provider.path, provider.too_many)
    row_id = commit_row(cfg, redis_client, provider, server)
    assert send([row_id], NOW) == {row_id: "retry"}
    row = Delivery.objects.get(id=row_id)
    assert row.next_attempt_at - NOW >= timedelta(seconds=5)
    assert send([row_id], NOW + timedelta(seconds=4)) == {row_id: "wait"}  # not yet
    assert server.hits() == 1


@by_id
def test_row24_a_redirect_to_loopback_is_refused_and_never_followed(
    provider, server, cfg, redis_client
):
    with TestHTTPServer() as target:
        target.route("*", "/meta", json_reply({"ok": True}))
        server.route("POST", provider.path, redirect(target.url("/meta"), 302))
        row_id = commit_row(cfg, redis_client, provider, server)
        assert send([row_id], NOW) == {row_id: "dead"}
        assert "redirect refused" in Delivery.objects.get(id=row_id).last_error
        assert target.hits() == 0


@by_id
def test_a_permanent_failure_is_visible_and_never_retried(provider, server, cfg, redis_client):
    server.route("POST", provider.path, provider.bad_recipient)
    row_id = commit_row(cfg, redis_client, provider, server)
    assert send([row_id], NOW) == {row_id: "dead"}
    out = StringIO()
    call_command("pollers", "deliveries", "--status", "dead", "--json", stdout=out)
    [shown] = [r for r in json.loads(out.getvalue()) if r["id"] == row_id]
    assert shown["status"] == "dead" and shown["last_error"]
    assert send([row_id], NOW + timedelta(days=1)) == {row_id: "skipped"}
    assert server.hits() == 1


def echo_everything(req):
    """A provider error whose text repeats the request (path, headers, body): a token
    anywhere in the request comes back in the error."""
    doc = {
        "ok": False,
        "error": "internal_error",
        "error_code": 500,
        "description": f"{req.target} {req.headers} {req.body.decode()}",
        "error_detail": {"message": req.target},
    }
    return json_reply(doc, status=500)(req)


@by_id
def test_row50_secrets_never_reach_logs_db_or_command_output(
    provider, server, cfg, redis_client, caplog, settings
):
    settings.NEXOPOLL_DELIVERY_MAX_ATTEMPTS = 2
    caplog.set_level("DEBUG")
    server.route("POST", provider.path, echo_everything)
    row_id = commit_row(cfg, redis_client, provider, server)
    assert send([row_id], NOW) == {row_id: "retry"}
    at = Delivery.objects.get(id=row_id).next_attempt_at
    assert send([row_id], at) == {row_id: "dead"}
    assert any(CANARY in (r.header("Authorization") or r.target) for r in server.requests)
    outputs = [caplog.text]
    for args in (["deliveries", "--json"], ["deliveries"], ["show", "a"], ["list", "--json"]):
        out = StringIO()
        call_command("pollers", *args, stdout=out, stderr=out)
        outputs.append(out.getvalue())
    dump = StringIO()
    call_command("dumpdata", "nexopoll", stdout=dump)
    outputs.append(dump.getvalue())
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", "r@example.com", "pw"))
    for page in (
        "/admin/admin_ext/outboxrow/",
        f"/admin/admin_ext/outboxrow/{row_id}/change/",
        "/admin/admin_ext/job/a/change/",
        "/admin/admin_ext/job/",
    ):
        resp = admin.get(page)
        assert resp.status_code == 200, page
        outputs.append(resp.content.decode())
    for text in outputs:
        assert CANARY not in text
    if provider is TELEGRAM:  # the echoed token was in the description, masked
        assert "***" in Delivery.objects.get(id=row_id).last_error


def test_a_wrong_telegram_token_holds_the_row_with_the_token_masked(server, cfg, redis_client):
    server.route("POST", TELEGRAM.path, json_reply({"ok": False, "description": "Not Found"}, 404))
    row_id = commit_row(cfg, redis_client, TELEGRAM, server)
    assert send([row_id], NOW) == {row_id: "held"}
    row = Delivery.objects.get(id=row_id)
    assert row.attempts == 0 and "bot token" in row.last_error and CANARY not in row.last_error
