"""Email and stream through the outbox: retries keep one delivery id, a lost answer
is re-sent under the same id (Message-ID for mail; nothing added for the stream),
a refused recipient is dead and visible, secrets stay out of the DB and logs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from nexopoll.models import Delivery
from nexopoll.runtime.delivery import deliver_rows
from nexopoll.runtime.tick import tick_job
from tests.support.smtpserver import SMTPServer

from .conftest import scripted

NOW = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)
CANARY = "smtp-CANARY-pass-93"


def send(ids, at):
    return deliver_rows(ids, clock=lambda: at)


def commit(cfg, redis_client, channel, to, binding, n=1) -> list[str]:
    cfg.write(
        [scripted("a", config={"deliver": {"channel": channel, "to": to}})],
        agents={"ana": {channel: binding}},
    )
    assert cfg.reload().issues == []
    redis_client.rpush("test:src:a", *range(1, n + 1))
    return tick_job("a", now=NOW).delivery_ids


@pytest.fixture
def smtp(settings):
    with SMTPServer() as server:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", server.port
        yield server


def test_email_fails_twice_then_is_delivered_once_under_one_message_id(smtp, cfg, redis_client):
    (row_id,) = commit(cfg, redis_client, "email", "ops@example.com", {"sender": "b@example.com"})
    smtp.data_reply = "451 4.3.0 try again later"
    at = NOW
    for _ in range(2):
        assert send([row_id], at) == {row_id: "retry"}
        at = Delivery.objects.get(id=row_id).next_attempt_at
    smtp.data_reply = None
    assert send([row_id], at) == {row_id: "sent"}
    [mail] = smtp.messages
    assert mail["Message-ID"] == f"<{row_id}@nexopoll>" and mail["Subject"] == "item 1"
    assert send([row_id], at + timedelta(days=1)) == {row_id: "skipped"}
    assert len(smtp.messages) == 1


def test_email_a_lost_answer_resends_under_the_same_message_id(smtp, cfg, redis_client):
    (row_id,) = commit(cfg, redis_client, "email", "ops@example.com", {"sender": "b@example.com"})
    smtp.drop_after_data = True
    assert send([row_id], NOW) == {row_id: "retry"}
    assert send([row_id], Delivery.objects.get(id=row_id).next_attempt_at) == {row_id: "sent"}
    assert [m["Message-ID"] for m in smtp.messages] == [f"<{row_id}@nexopoll>"] * 2


def test_email_a_refused_recipient_is_dead_visible_and_not_retried(smtp, cfg, redis_client):
    (row_id,) = commit(cfg, redis_client, "email", "nobody@example.com", {"sender": "b@e.com"})
    smtp.rcpt_reply = "550 5.1.1 no such user"
    assert send([row_id], NOW) == {row_id: "dead"}
    row = Delivery.objects.get(id=row_id)
    assert "refused the recipient" in row.last_error and row.attempts == 1
    assert send([row_id], NOW + timedelta(days=1)) == {row_id: "skipped"}


def test_email_password_never_reaches_the_db_or_logs(smtp, cfg, redis_client, settings, caplog):
    caplog.set_level("DEBUG")
    settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD = "bot", CANARY
    (row_id,) = commit(cfg, redis_client, "email", "ops@example.com", {"sender": "b@example.com"})
    send([row_id], NOW)  # the server offers no AUTH: smtplib refuses to log in
    row = Delivery.objects.get(id=row_id)
    assert row.status in ("held", "pending", "dead")
    dump = StringIO()
    call_command("dumpdata", "nexopoll", stdout=dump)
    assert CANARY not in dump.getvalue() and CANARY not in caplog.text


def test_stream_deliveries_are_read_back_through_a_consumer_group(cfg, redis_client):
    ids = commit(
        cfg,
        redis_client,
        "stream",
        "1194292426",
        {"account": "ana_bot", "channel": "telegram"},
        n=3,
    )
    key = "plugin.outbound.telegram.ana_bot"
    redis_client.xgroup_create(key, "bridge", id="0", mkstream=True)
    assert send(ids, NOW) == dict.fromkeys(ids, "sent")
    [(_, entries)] = redis_client.xreadgroup("bridge", "worker-1", {key: ">"}, count=10)
    assert [e["delivery_id"] for _, e in entries] == ids
    assert [json.loads(e["payload"])["text"] for _, e in entries] == ["item 1", "item 2", "item 3"]
    assert {(e["job"], e["agent"], e["recipient"]) for _, e in entries} == {
        ("a", "ana", "1194292426")
    }
    redis_client.xack(key, "bridge", *[eid for eid, _ in entries])
    # a duplicate deliver message, or a retry after a lost answer, adds nothing
    Delivery.objects.filter(id__in=ids).update(status="pending", claimed_until=None)
    assert send(ids, NOW) == dict.fromkeys(ids, "sent")
    assert redis_client.xlen(key) == 3


def test_a_stream_without_redis_is_a_transient_failure(cfg, redis_client, settings):
    (row_id,) = commit(cfg, redis_client, "stream", "x", {"account": "ana_bot"})
    from nexopoll.runtime import redis as rmod

    good = settings.REDIS_URL
    settings.REDIS_URL = "redis://127.0.0.1:9/0"  # nothing listens there
    rmod._client = None
    try:
        assert send([row_id], NOW) == {row_id: "retry"}
    finally:
        settings.REDIS_URL = good
        rmod._client = None
    assert "XADD" in Delivery.objects.get(id=row_id).last_error


def test_stream_redeliver_force_adds_the_entry_again(cfg, redis_client):
    """A consumer lost what it read (its stream was trimmed or deleted): ``pollers
    redeliver --force`` sends the row again, the marker does not swallow it."""
    (row_id,) = commit(cfg, redis_client, "stream", "42", {"account": "ana_bot"})
    key = "plugin.outbound.stream.ana_bot"
    assert send([row_id], NOW) == {row_id: "sent"}
    redis_client.delete(key)  # the receiver lost it
    out = StringIO()
    call_command("pollers", "redeliver", row_id, "--force", stdout=out)
    assert "requeued 1 row(s)" in out.getvalue()
    later = timezone.now() + timedelta(seconds=1)  # redeliver made it due now
    assert send([row_id], later) == {row_id: "sent"}
    [(_, entry)] = redis_client.xrange(key)
    assert entry["delivery_id"] == row_id
    # an ordinary retry after a lost answer still adds nothing
    Delivery.objects.filter(id=row_id).update(status="pending", claimed_until=None)
    assert send([row_id], later) == {row_id: "sent"}
    assert redis_client.xlen(key) == 1


def test_stream_redeliver_force_is_refused_while_redis_is_down(cfg, redis_client, settings):
    (row_id,) = commit(cfg, redis_client, "stream", "42", {"account": "ana_bot"})
    assert send([row_id], NOW) == {row_id: "sent"}
    from nexopoll.runtime import redis as rmod

    good = settings.REDIS_URL
    settings.REDIS_URL = "redis://127.0.0.1:9/0"  # nothing listens there
    rmod._client = None
    try:
        with pytest.raises(CommandError, match="cannot send again"):
            call_command("pollers", "redeliver", row_id, "--force", stdout=StringIO())
    finally:
        settings.REDIS_URL = good
        rmod._client = None
    assert Delivery.objects.get(id=row_id).status == "sent"
