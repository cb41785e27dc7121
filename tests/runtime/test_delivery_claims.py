"""Who may send an outbox row: one sender per live claim, whatever its clock says,
and never a row that is already sent or dead-lettered."""

from __future__ import annotations

import itertools
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from nexopoll import tasks
from nexopoll.models import Delivery
from nexopoll.runtime.delivery import deliver_rows
from tests.support.httpserver import TestHTTPServer, reply
from tests.support.procs import wait_for

from .test_delivery import NOW, send, setup_job


def first_request_waits(release: threading.Event):
    """A receiver whose first request is answered only once ``release`` is set."""
    counter = itertools.count()

    def handle(req):
        if next(counter) == 0:
            release.wait(20)
        return (200, {}, b"")

    return handle


class Sender(threading.Thread):
    """A second worker: ``deliver_rows`` in its own thread, DB connection and clock."""

    def __init__(self, ids: list[str], skew: timedelta) -> None:
        super().__init__(daemon=True)
        self.ids, self.skew = ids, skew
        self.outcome: dict[str, str] | None = None

    def run(self) -> None:
        try:
            self.outcome = deliver_rows(self.ids, clock=lambda: timezone.now() + self.skew)
        finally:
            connection.close()


@pytest.mark.parametrize(
    ("first_skew", "second_skew"),
    [
        (0, 0),  # a row under a live claim is not sent by a second sender
        (0, 90),  # the second sender's clock is 90 s fast (issue 5, 10f)
        (0, 300),  # RELIABILITY row 16: ±300 s between workers
        (-300, 0),  # the claiming sender's clock is slow: its claim must not look expired
    ],
)
def test_a_row_under_a_live_claim_is_not_sent_by_a_second_sender(
    cfg, redis_client, first_skew, second_skew
):
    release = threading.Event()
    with TestHTTPServer() as hook:
        hook.route("POST", "/hook", first_request_waits(release))
        (row_id,) = setup_job(cfg, redis_client, hook.url("/hook"))
        first = Sender([row_id], timedelta(seconds=first_skew))
        first.start()
        try:
            wait_for(lambda: hook.hits("/hook") == 1, 10, what="the first send in flight")
            second = deliver_rows(
                [row_id], clock=lambda: timezone.now() + timedelta(seconds=second_skew)
            )
        finally:
            release.set()
            first.join(20)
        assert second == {row_id: "skipped"}
        assert first.outcome == {row_id: "sent"}
        assert hook.hits("/hook") == 1
        row = Delivery.objects.get(id=row_id)
        assert (row.status, row.attempts, row.claimed_until) == ("sent", 1, None)


def test_a_claim_is_written_with_the_db_clock_not_the_senders(cfg, redis_client):
    """A sender whose clock is a day behind still claims for CLAIM_SECS of DB time."""
    from nexopoll.runtime.delivery import CLAIM, claim

    with TestHTTPServer() as hook:
        hook.route("POST", "/hook", reply(200))
        (row_id,) = setup_job(cfg, redis_client, hook.url("/hook"))
        before = timezone.now()
        assert claim(row_id, now=NOW)  # NOW is a day before the DB's clock
        claimed_until = Delivery.objects.get(id=row_id).claimed_until
        assert before + CLAIM - timedelta(seconds=5) <= claimed_until
        assert claimed_until <= timezone.now() + CLAIM + timedelta(seconds=5)


def test_a_duplicate_deliver_task_never_sends_a_sent_row_again(cfg, redis_client):
    with TestHTTPServer() as hook:
        hook.route("POST", "/hook", reply(200))
        (row_id,) = setup_job(cfg, redis_client, hook.url("/hook"))
        assert tasks.deliver([row_id]) == {row_id: "sent"}
        # the same message delivered twice (acks_late redelivery), or a sweeper's copy
        assert tasks.deliver([row_id]) == {row_id: "skipped"}
        assert send([row_id], NOW + timedelta(days=30)) == {row_id: "skipped"}
        assert hook.hits("/hook") == 1
        assert Delivery.objects.get(id=row_id).attempts == 1


def test_a_duplicate_deliver_task_never_sends_a_dead_row_again(cfg, redis_client):
    with TestHTTPServer() as hook:
        hook.route("POST", "/hook", reply(400))  # permanent: dead at the first attempt
        (row_id,) = setup_job(cfg, redis_client, hook.url("/hook"))
        assert tasks.deliver([row_id]) == {row_id: "dead"}
        hook.route("POST", "/hook", reply(200))  # the receiver is fixed meanwhile
        assert tasks.deliver([row_id]) == {row_id: "skipped"}
        assert send([row_id], NOW + timedelta(days=30)) == {row_id: "skipped"}
        assert hook.hits("/hook") == 1
        row = Delivery.objects.get(id=row_id)
        assert (row.status, row.attempts) == ("dead", 1)
