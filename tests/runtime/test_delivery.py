"""Outbox delivery: retries keep the delivery id, backoff, dead-letter, no redirects."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from nexopoll.models import Delivery
from nexopoll.runtime.delivery import deliver_rows, due_rows
from nexopoll.runtime.tick import tick_job
from tests.support.httpserver import TestHTTPServer, redirect, reply, sequence
from tests.support.procs import free_port
from tests.support.sink import Sink

from .conftest import scripted

NOW = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)


def send(ids: list[str], at: datetime) -> dict[str, str]:
    return deliver_rows(ids, clock=lambda: at)


def setup_job(cfg, redis_client, url: str) -> list[str]:
    agents = {"ana": {"webhook": {"url": url, "allow_private_networks": True}}}
    cfg.write(
        [scripted("a", config={"deliver": {"channel": "webhook", "to": "ops"}})], agents=agents
    )
    cfg.reload()
    redis_client.rpush("test:src:a", 1)
    return tick_job("a", now=NOW).delivery_ids


def test_failed_delivery_backs_off_then_retries_with_the_same_id(cfg, redis_client):
    with TestHTTPServer() as hook:
        hook.route("POST", "/hook", sequence(500, 500, 200))
        (row_id,) = setup_job(cfg, redis_client, hook.url("/hook"))
        assert send([row_id], NOW) == {row_id: "retry"}
        first = Delivery.objects.get(id=row_id)
        assert first.status == "pending" and first.next_attempt_at > NOW
        # not due yet: nobody claims it; the message is consumed and re-queued (wait)
        assert send([row_id], NOW) == {row_id: "wait"}
        later = first.next_attempt_at
        assert send([row_id], later) == {row_id: "retry"}
        second = Delivery.objects.get(id=row_id)
        assert second.next_attempt_at - later > first.next_attempt_at - NOW  # doubling
        assert send([row_id], second.next_attempt_at) == {row_id: "sent"}
        ids = {r.header("X-Nexopoll-Delivery-Id") for r in hook.requests}
        assert ids == {row_id} and hook.hits("/hook") == 3
        assert Delivery.objects.get(id=row_id).attempts == 3


def test_429_retry_after_is_honoured(cfg, redis_client):
    with TestHTTPServer() as hook:
        hook.route("POST", "/hook", reply(429, b"", {"Retry-After": "120"}))
        (row_id,) = setup_job(cfg, redis_client, hook.url("/hook"))
        send([row_id], NOW)
        row = Delivery.objects.get(id=row_id)
        assert row.next_attempt_at >= NOW + timedelta(seconds=120)


def test_dead_letter_after_max_attempts(cfg, redis_client, settings):
    settings.NEXOPOLL_DELIVERY_MAX_ATTEMPTS = 2
    with TestHTTPServer() as hook:
        hook.route("POST", "/hook", reply(503))
        (row_id,) = setup_job(cfg, redis_client, hook.url("/hook"))
        send([row_id], NOW)
        row = Delivery.objects.get(id=row_id)
        assert send([row_id], row.next_attempt_at) == {row_id: "dead"}
        row = Delivery.objects.get(id=row_id)
        assert row.status == "dead" and "503" in row.last_error
        assert row_id not in due_rows(now=NOW + timedelta(days=1))


def test_redirecting_receiver_is_not_followed(cfg, redis_client):
    """RELIABILITY row 24: a webhook redirect to loopback is refused, the target gets 0 hits."""
    with TestHTTPServer() as hook, TestHTTPServer() as target:
        target.route("POST", "/steal", reply(200))
        hook.route("POST", "/hook", redirect(target.url("/steal")))
        (row_id,) = setup_job(cfg, redis_client, hook.url("/hook"))
        assert send([row_id], NOW) == {row_id: "dead"}
        assert "redirect refused" in Delivery.objects.get(id=row_id).last_error
        assert target.hits() == 0


def test_sweeper_picks_up_rows_left_pending(cfg, redis_client):
    with Sink() as sink:
        (row_id,) = setup_job(cfg, redis_client, sink.url)
        # queued (and marked) after the commit: the sweeper leaves it to that message
        assert due_rows(now=NOW + timedelta(seconds=10)) == []
        # its message never went out (the process died between commit and publish)
        Delivery.objects.filter(id=row_id).update(enqueued_at=None)
        assert due_rows(now=NOW) == []  # inside the grace period the normal path owns it
        assert due_rows(now=NOW + timedelta(seconds=10)) == [row_id]
        send(due_rows(now=NOW + timedelta(seconds=10)), NOW + timedelta(seconds=10))
        assert [h["delivery_id"] for h in sink.hits] == [row_id]
        assert due_rows(now=NOW + timedelta(seconds=20)) == []


def test_poison_tick_is_capped_after_repeated_worker_deaths(cfg, redis_client, settings):
    """RELIABILITY row 2: a tick that kills its worker every time stops being retried."""
    from nexopoll.models import PollState

    settings.NEXOPOLL_MAX_CRASHES = 3
    cfg.write([scripted("a", failure_to={"channel": "log", "to": "oncall"})], breaker_threshold=1)
    cfg.reload()
    # two earlier ticks started and never finished (their worker died)
    PollState.objects.filter(job_id="a").update(running_since=NOW, crash_count=2)
    report = tick_job("a", now=NOW)
    assert report.status == "transient" and "worker died during 3" in report.error
    assert redis_client.get("test:ticks:a") is None  # the poller was not run again
    s = PollState.objects.get(job_id="a")
    assert s.crash_count == 0 and s.running_since is None and s.breaker_open_until is not None
    assert Delivery.objects.filter(purpose="alert").count() == 1


def test_a_row_whose_send_kills_the_worker_is_capped_and_dead_lettered(cfg, redis_client, settings):
    """Every claim counts an attempt; a row that never reaches an outcome stops at the cap."""
    from nexopoll.runtime.delivery import dead_letter_exhausted

    settings.NEXOPOLL_DELIVERY_MAX_ATTEMPTS = 2
    with Sink() as sink:
        (row_id,) = setup_job(cfg, redis_client, sink.url)
        # two claims whose worker died mid-send: attempts used, no outcome recorded
        Delivery.objects.filter(id=row_id).update(attempts=2, claimed_until=NOW)
        assert send([row_id], NOW + timedelta(minutes=5)) == {row_id: "skipped"}
        assert sink.hits == []
        assert dead_letter_exhausted(now=NOW + timedelta(minutes=5)) == 1
        assert Delivery.objects.get(id=row_id).status == "dead"


def test_a_batch_stops_at_its_time_budget_and_defers_the_rest(cfg, redis_client):
    with Sink() as sink:
        (row_id,) = setup_job(cfg, redis_client, sink.url)
        assert deliver_rows([row_id], clock=lambda: NOW, budget_secs=-1) == {row_id: "deferred"}
        assert sink.hits == [] and Delivery.objects.get(id=row_id).attempts == 0


def test_secrets_in_the_receiver_url_never_reach_the_outbox_or_logs(
    cfg, redis_client, monkeypatch, caplog
):
    """A token in the webhook URL path must not leak through a failure's error text."""

    port = free_port()  # a port nobody listens on: the error names the URL
    monkeypatch.setenv("HOOK_TOKEN", "tok-CANARY-123")
    agents = {
        "ana": {
            "webhook": {
                "url": f"http://127.0.0.1:{port}/hook/${{HOOK_TOKEN}}",
                "allow_private_networks": True,
            }
        }
    }
    cfg.write(
        [scripted("a", config={"deliver": {"channel": "webhook", "to": "ops"}})], agents=agents
    )
    cfg.reload()
    redis_client.rpush("test:src:a", 1)
    (row_id,) = tick_job("a", now=NOW).delivery_ids
    assert send([row_id], NOW) == {row_id: "retry"}
    row = Delivery.objects.get(id=row_id)
    assert "/hook/***" in row.last_error  # the URL was in the message, masked
    assert "tok-CANARY-123" not in row.last_error
    assert "tok-CANARY-123" not in caplog.text
    from nexopoll.models import Agent

    assert "tok-CANARY-123" not in repr(list(Agent.objects.values()))


def hang_up_after_reading(req):
    """A receiver that reads (and records) the whole request, then closes without a reply."""
    return lambda raw: None


def test_response_lost_after_the_receiver_processed_is_resent_under_the_same_id(cfg, redis_client):
    """RELIABILITY row 20: the receiver got the POST but its answer never arrived."""
    with TestHTTPServer() as hook:
        hook.route("POST", "/hook", sequence(hang_up_after_reading, 200))
        (row_id,) = setup_job(cfg, redis_client, hook.url("/hook"))
        assert send([row_id], NOW) == {row_id: "retry"}
        row = Delivery.objects.get(id=row_id)
        assert row.status == "pending" and row.last_error  # the lost answer is an error
        assert send([row_id], row.next_attempt_at) == {row_id: "sent"}
        assert hook.hits("/hook") == 2
        ids = [r.header("X-Nexopoll-Delivery-Id") for r in hook.requests]
        bodies = {json.loads(r.body)["delivery_id"] for r in hook.requests}
        assert ids == [row_id, row_id] and bodies == {row_id}
        row = Delivery.objects.get(id=row_id)
        assert (row.status, row.attempts, row.last_error) == ("sent", 2, "")
        # sent once: nothing sends it again, however late
        assert send([row_id], NOW + timedelta(days=1)) == {row_id: "skipped"}
        assert hook.hits("/hook") == 2


def test_a_failing_receiver_backs_off_through_short_etas_and_the_sweeper(cfg, redis_client):
    """RELIABILITY row 21: a short backoff goes back on the queue with an ETA under a
    minute; a long one (Retry-After: 1 h) is left to the sweeper, so no message ever
    carries an ETA near the broker's visibility timeout. The cursor is untouched."""
    from nexopoll import tasks
    from nexopoll.models import PollState
    from tests.support.celeryqueue import deliver_etas

    with TestHTTPServer() as hook:
        hook.route("POST", "/hook", sequence(500, reply(429, b"", {"Retry-After": "3600"})))
        (row_id,) = setup_job(cfg, redis_client, hook.url("/hook"))
        cursor = bytes(PollState.objects.get(job_id="a").cursor)
        redis_client.delete("nexopoll", "nexopoll.deliveries")
        before = datetime.now(UTC)
        assert tasks.deliver([row_id]) == {row_id: "retry"}
        eta = datetime.fromisoformat(deliver_etas(redis_client)[row_id])
        row = Delivery.objects.get(id=row_id)
        assert before < eta <= before + timedelta(seconds=61)
        assert abs((eta - row.next_attempt_at).total_seconds()) < 2
        redis_client.delete("nexopoll", "nexopoll.deliveries")
        Delivery.objects.filter(id=row_id).update(next_attempt_at=NOW)  # the ETA came
        assert tasks.deliver([row_id]) == {row_id: "retry"}
        row = Delivery.objects.get(id=row_id)
        assert row.next_attempt_at >= datetime.now(UTC) + timedelta(minutes=59)
        assert deliver_etas(redis_client) == {}  # the sweeper's, in an hour
        assert bytes(PollState.objects.get(job_id="a").cursor) == cursor
        assert hook.hits("/hook") == 2


def test_a_slow_receiver_is_cut_at_the_deadline_and_retried(cfg, redis_client, settings):
    """RELIABILITY row 22: a receiver that reads the request and answers nothing, and a
    slow-loris one, cost one deadline each; the worker is freed and a retry scheduled."""
    import time

    from tests.support.httpserver import drip

    settings.NEXOPOLL_DELIVERY_DEADLINE_SECS = 1.5

    def silent(req):
        return lambda raw: raw.sleep(30)

    with TestHTTPServer() as hook:
        hook.route("POST", "/hook", sequence(silent, drip(b"x" * 100, interval=0.3), 200))
        (row_id,) = setup_job(cfg, redis_client, hook.url("/hook"))
        at = NOW
        for _ in range(2):
            started = time.monotonic()
            assert send([row_id], at) == {row_id: "retry"}
            assert time.monotonic() - started < 1.5 + 1.0
            row = Delivery.objects.get(id=row_id)
            assert row.status == "pending" and row.next_attempt_at > at
            assert "deadline" in row.last_error.lower()
            at = row.next_attempt_at
        assert send([row_id], at) == {row_id: "sent"}
        assert {r.header("X-Nexopoll-Delivery-Id") for r in hook.requests} == {row_id}
