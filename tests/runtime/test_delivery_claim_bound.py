"""A send never outlives its claim: the channel's deadline ends before the claim does
(a slow SMTP conversation fails as a timeout instead of going on while a second
worker sends the row again), and a worker whose claim was lost to another one writes
no outcome over that worker's claim."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.utils import timezone

from nexopoll import channels
from nexopoll.core.errors import TransientError
from nexopoll.models import Delivery
from nexopoll.runtime.delivery import deliver_one, live_claim
from tests.support.outbox import outbox_row
from tests.support.procs import wait_for
from tests.support.smtpserver import SMTPServer

from .test_channel_email_stream import commit

CLAIM = 2.0


class Worker(threading.Thread):
    """``deliver_one`` on its own thread (and DB connection), as another worker."""

    def __init__(self, row_id: str, now) -> None:
        super().__init__(daemon=True)
        self.row_id, self.now, self.outcome, self.secs = row_id, now, None, 0.0

    def run(self) -> None:
        started = time.monotonic()
        try:
            self.outcome = deliver_one(self.row_id, now=self.now)
        finally:
            self.secs = time.monotonic() - started
            connection.close()


def claim_lapsed(row_id: str) -> bool:
    return Delivery.objects.filter(live_claim(), id=row_id).exists()


def test_a_slow_smtp_conversation_ends_before_its_claim(cfg, redis_client, settings):
    """Claim 2 s; the server answers MAIL and RCPT after 1.2 s each (2.4 s in all, each
    step far inside the 30 s per-step timeout). The first worker's send stops before
    its claim ends; the second worker, taking the row once the claim is over, sends
    the one mail."""
    settings.NEXOPOLL_DELIVERY_CLAIM_SECS = CLAIM
    with SMTPServer() as smtp:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", smtp.port
        (row_id,) = commit(
            cfg, redis_client, "email", "ops@example.com", {"sender": "b@example.com"}
        )
        smtp.slow(1.2)
        now = timezone.now()
        first = Worker(row_id, now)
        first.start()
        wait_for(lambda: Delivery.objects.get(id=row_id).attempts == 1, 10, what="a claim")
        wait_for(lambda: claim_lapsed(row_id) or not first.is_alive(), 10, what="claim over")
        second = Worker(row_id, now + timedelta(hours=1))  # due whatever the backoff
        second.start()
        second.join(20)
        first.join(20)
        assert first.outcome == "retry" and first.secs < CLAIM, (first.outcome, first.secs)
        assert second.outcome == "sent"
        wait_for(lambda: smtp.messages, 5, what="the mail")
        assert len(smtp.messages) == 1
        row = Delivery.objects.get(id=row_id)
        assert (row.status, row.attempts, row.claimed_until) == ("sent", 2, None)


class Blocking:
    """A channel whose send waits for the test and ignores its deadline (as a
    third-party channel may)."""

    name = "blocking"

    def __init__(self) -> None:
        self.entered = threading.Semaphore(0)
        self.results: list[Exception | None] = []
        self.go = [threading.Event(), threading.Event()]
        self.calls = 0

    def send(self, message, binding, *, deadline_secs: float) -> None:
        n = self.calls
        self.calls += 1
        self.entered.release()
        assert self.go[n].wait(20)
        if self.results[n] is not None:
            raise self.results[n]


@pytest.fixture
def blocking(transactional_db):
    installed = channels._installed()
    ch = installed["blocking"] = Blocking()
    try:
        yield ch
    finally:
        del installed["blocking"]


@pytest.mark.parametrize("first_ends", ["failed", "sent"])
def test_a_send_that_lost_its_claim_writes_nothing_over_the_new_one(blocking, first_ends):
    now = timezone.now()
    row = outbox_row("j", at=now, channel="blocking", recipient="x")
    row_id = str(row.id)
    blocking.results = [TransientError("boom") if first_ends == "failed" else None, None]
    first = Worker(row_id, now)
    first.start()
    assert blocking.entered.acquire(timeout=10)
    # the first claim runs out (DB time) while its send goes on; a second worker takes it
    Delivery.objects.filter(id=row_id).update(claimed_until=Now() - timedelta(seconds=1))
    second = Worker(row_id, now)
    second.start()
    assert blocking.entered.acquire(timeout=10)
    second_claim = Delivery.objects.get(id=row_id).claimed_until
    blocking.go[0].set()
    first.join(10)
    assert first.outcome == "lost"
    row = Delivery.objects.get(id=row_id)
    assert (row.status, row.claimed_until, row.attempts) == ("pending", second_claim, 2)
    assert row.next_attempt_at == now and row.last_error == ""
    blocking.go[1].set()
    second.join(10)
    assert second.outcome == "sent"
    assert Delivery.objects.get(id=row_id).status == "sent"


def test_a_stream_send_to_a_stalled_redis_ends_before_its_claim(cfg, redis_client, settings):
    """Redis stops answering (SIGSTOP) while a stream row is sent under a 2 s claim: the
    XADD gives up before the claim ends (the shared client would wait 10 s)."""
    from nexopoll.runtime import redis as rmod
    from tests.support.procs import RedisServer

    settings.NEXOPOLL_DELIVERY_CLAIM_SECS = CLAIM
    (row_id,) = commit(cfg, redis_client, "stream", "42", {"account": "ana_bot"})
    stalled = RedisServer()
    stalled.start()
    good = settings.REDIS_URL
    settings.REDIS_URL, rmod._client = stalled.url, None
    stalled.pause()
    try:
        worker = Worker(row_id, timezone.now() + timedelta(days=1))
        worker.start()
        worker.join(20)
    finally:
        stalled.resume()
        settings.REDIS_URL, rmod._client = good, None
        stalled.stop()
    assert worker.outcome == "retry" and worker.secs < CLAIM, (worker.outcome, worker.secs)
    assert "XADD" in Delivery.objects.get(id=row_id).last_error
