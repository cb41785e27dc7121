"""Provider rate limits (Redis, across workers), dispatch_delay_ms pacing, and failure
alerts through the same channels. A row waiting for its turn is not a failure: it is
not claimed, its attempt is not counted, and the deliver task re-queues it."""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime, timedelta

from django.utils import timezone

from nexopoll import tasks
from nexopoll.models import Delivery
from nexopoll.runtime import ratelimit
from nexopoll.runtime.delivery import deliver_rows
from nexopoll.runtime.tick import tick_job
from tests.support.celeryqueue import deliver_etas
from tests.support.httpserver import TestHTTPServer
from tests.support.providers import TELEGRAM, point_all, sent_doc

from .conftest import scripted

NOW = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)


def send(ids, at):
    return deliver_rows(ids, clock=lambda: at)


def telegram_job(cfg, redis_client, server, n: int, *, to="42", binding=None, **config):
    cfg.write(
        [scripted("a", config={"deliver": {"channel": "telegram", "to": to}, **config})],
        agents={"ana": {"telegram": {**TELEGRAM.binding(server), **(binding or {})}}},
    )
    assert cfg.reload().issues == []
    redis_client.rpush("test:src:a", *range(1, n + 1))
    return tick_job("a", now=NOW).delivery_ids


def test_acquire_spaces_turns_and_takes_all_scopes_or_none(redis_client):
    limits = [("bot:b", 30.0), ("chat:b:1", 2.0)]
    assert ratelimit.acquire(redis_client, "telegram", limits) == 0
    wait = ratelimit.acquire(redis_client, "telegram", limits)
    assert 0.4 < wait <= 0.5  # the chat's 2/s: half a second apart
    # another chat of the same bot is only held to the bot's 30/s
    assert ratelimit.acquire(redis_client, "telegram", [("bot:b", 30.0), ("chat:b:2", 2.0)]) < 0.04


def test_a_row_waiting_for_its_turn_is_not_a_failure(cfg, redis_client, monkeypatch):
    with TestHTTPServer() as server:
        point_all(monkeypatch, server)
        server.route("POST", TELEGRAM.path, TELEGRAM.ok)
        ids = telegram_job(cfg, redis_client, server, 3)
        outcomes = send(ids, NOW)
        assert sorted(outcomes.values()) == ["sent", "wait", "wait"]
        for row in Delivery.objects.filter(id__in=[i for i in ids if outcomes[i] == "wait"]):
            assert (row.status, row.attempts, row.last_error) == ("pending", 0, "")
            assert NOW < row.next_attempt_at <= NOW + timedelta(seconds=1.1)
            assert row.enqueued_at is None and row.claimed_until is None
        assert server.hits() == 1


def test_one_chat_gets_one_message_per_second(cfg, redis_client, monkeypatch):
    with TestHTTPServer() as server:
        point_all(monkeypatch, server)
        server.route("POST", TELEGRAM.path, TELEGRAM.ok)
        ids = telegram_job(cfg, redis_client, server, 3)
        deadline = time.monotonic() + 10
        while Delivery.objects.filter(id__in=ids, status="sent").count() < 3:
            assert time.monotonic() < deadline
            send(ids, timezone.now())
            time.sleep(0.05)
        times = [r.at for r in server.requests]
        assert len(times) == 3 and all(b - a >= 0.9 for a, b in itertools.pairwise(times))
        assert set(Delivery.objects.filter(id__in=ids).values_list("attempts", flat=True)) == {1}


def test_different_chats_are_not_held_to_the_chat_limit(cfg, redis_client, monkeypatch):
    """Two rows to two chats go out together; two rows to one chat do not."""
    with TestHTTPServer() as server:
        point_all(monkeypatch, server)
        server.route("POST", TELEGRAM.path, TELEGRAM.ok)
        bot = {"max_per_second": 1000}  # only the per-chat limit (1/s) is in play
        cfg.write(
            [
                scripted("a", config={"deliver": {"channel": "telegram", "to": "1"}}),
                scripted("b", config={"deliver": {"channel": "telegram", "to": "2"}}),
            ],
            agents={"ana": {"telegram": {**TELEGRAM.binding(server), **bot}}},
        )
        assert cfg.reload().issues == []
        redis_client.rpush("test:src:a", 1, 2)
        redis_client.rpush("test:src:b", 1)
        a1, a2 = tick_job("a", now=NOW).delivery_ids
        (b1,) = tick_job("b", now=NOW).delivery_ids
        assert send([a1, b1, a2], NOW) == {a1: "sent", b1: "sent", a2: "wait"}


def test_the_deliver_task_requeues_waiting_rows_with_a_countdown(cfg, redis_client, monkeypatch):
    with TestHTTPServer() as server:
        point_all(monkeypatch, server)
        server.route("POST", TELEGRAM.path, TELEGRAM.ok)
        ids = telegram_job(cfg, redis_client, server, 2)
        Delivery.objects.filter(id__in=ids).update(next_attempt_at=timezone.now())
        redis_client.delete("nexopoll", "nexopoll.deliveries")
        outcomes = tasks.deliver.run(ids)
        [waiting] = [i for i in ids if outcomes[i] == "wait"]
        etas = deliver_etas(redis_client)
        assert list(etas) == [waiting] and etas[waiting] is not None  # a countdown, not now
        eta = datetime.fromisoformat(etas[waiting])
        assert timezone.now() < eta <= timezone.now() + timedelta(seconds=1.5)
        assert Delivery.objects.get(id=waiting).attempts == 0


def test_dispatch_delay_ms_spaces_one_jobs_deliveries(cfg, redis_client, monkeypatch):
    with TestHTTPServer() as server:
        point_all(monkeypatch, server)
        server.route("POST", TELEGRAM.path, TELEGRAM.ok)
        fast = {"max_per_chat_per_second": 1000, "max_per_second": 1000}
        ids = telegram_job(cfg, redis_client, server, 3, binding=fast, dispatch_delay_ms=500)
        due = [Delivery.objects.get(id=i).next_attempt_at - NOW for i in ids]
        assert due == [timedelta(0), timedelta(milliseconds=500), timedelta(milliseconds=1000)]
        assert send(ids, NOW) == {ids[0]: "sent", ids[1]: "wait", ids[2]: "wait"}
        assert send(ids, NOW + timedelta(milliseconds=500))[ids[1]] == "sent"
        assert Delivery.objects.get(id=ids[2]).attempts == 0
        # the next tick's items queue up after the ones still waiting
        redis_client.rpush("test:src:a", 4)
        (later,) = tick_job("a", now=NOW + timedelta(milliseconds=100)).delivery_ids
        assert Delivery.objects.get(id=later).next_attempt_at == NOW + timedelta(seconds=1.5)


def test_failure_alerts_go_out_through_the_same_channel(cfg, redis_client, monkeypatch):
    with TestHTTPServer() as server:
        point_all(monkeypatch, server)
        server.route("POST", TELEGRAM.path, TELEGRAM.ok)
        job = scripted("a", failure_to={"channel": "telegram", "to": "99"})
        cfg.write(
            [job],
            agents={"ana": {"log": {}, "telegram": TELEGRAM.binding(server)}},
            breaker_threshold=1,
        )
        assert cfg.reload().issues == []
        redis_client.set("test:mode:a", "permanent")
        tick_job("a", now=NOW)
        [alert] = Delivery.objects.filter(purpose="alert")
        assert alert.channel == "telegram" and alert.recipient == "99"
        assert send([str(alert.id)], NOW) == {str(alert.id): "sent"}
        doc = sent_doc(server)
        assert doc["chat_id"] == "99" and "failing" in doc["text"]
        assert server.requests[0].header("X-Nexopoll-Delivery-Id") == str(alert.id)


def test_gmail_jobs_are_paced_one_second_apart_by_default(transactional_db):
    from types import SimpleNamespace

    from nexopoll.runtime import pacing
    from nexopoll.runtime.host import PendingDelivery

    rows = [
        PendingDelivery("log", "x", {}),
        PendingDelivery("log", "x", {}),
        PendingDelivery("log", "x", {}, "alert"),
    ]
    gmail = SimpleNamespace(job_id="g", kind="gmail", config={"query": "x"})
    assert pacing.due_times(gmail, rows, now=NOW) == [NOW, NOW + timedelta(seconds=1), NOW]
    off = SimpleNamespace(job_id="g", kind="gmail", config={"dispatch_delay_ms": 0})
    assert pacing.due_times(off, rows, now=NOW) == [NOW] * 3
    rss = SimpleNamespace(job_id="r", kind="rss", config={})
    assert pacing.due_times(rss, rows, now=NOW) == [NOW] * 3
