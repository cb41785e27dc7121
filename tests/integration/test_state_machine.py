"""A hypothesis state machine over the real stack's pieces, in-process.

Real DB (the test DB, SQLite or PostgreSQL), real Redis (the session's
redis-server: leases, the broker queue, the scripted source), a real loopback
webhook receiver that fails on demand. Rules interleave publishing at the source,
ticks (``tick_job`` with the scripted poller), the broker handing queued deliver
tasks to ``deliver_rows``, the outbox sweeper, ``reload_config`` (unchanged,
changed, job removed and re-added), pause/resume/reset, a lease expiring under a
running tick (the lease key deleted while the tick waits at its barrier; a second
tick takes over), a lost Redis reply on the lease acquire (a fault proxy), an
operator's pause/resume/reset/reload while a (failing) tick is in flight, a Redis
FLUSHALL, a crash between commit and enqueue (the queued deliver task lost),
receiver failures, the clock moving on, and workers with skewed clocks sharing a
provider rate limit.

After every step: no item lost (every item the cursor passed has a delivery row
that is sent, pending or held), duplicates at the receiver only under one delivery
id per item and reset generation, the cursor never backwards (except by a reset),
the canary secret in no DB row, log record or request body.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import threading
from datetime import timedelta

import pytest
import yaml
from django.core import serializers
from django.db.models import F
from django.utils import timezone
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from nexopoll import services
from nexopoll.models import Agent, Delivery, PollJob, PollState
from nexopoll.runtime import delivery, outbox
from nexopoll.runtime.delivery import requeue_after
from nexopoll.runtime.lease import lease_key
from nexopoll.runtime.redis import get_redis
from nexopoll.runtime.tick import tick_job
from tests.support.celeryqueue import DELIVERIES
from tests.support.httpserver import TestHTTPServer
from tests.support.invariants import CANARY, CANARY_VAR
from tests.support.procs import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

QUEUE = DELIVERIES  # deliver messages go to the delivery queue (settings: task_routes)
_examples = itertools.count()


class Receiver:
    """The webhook endpoint: records every POST; answers 500 while ``failing``."""

    def __init__(self) -> None:
        self.failing = False
        self.server = TestHTTPServer().route("POST", "/hook", self._handle)

    def _handle(self, req):
        return (500 if self.failing else 200, {}, b"")

    def hits(self, job_id: str) -> list[tuple[int, str, bool]]:
        """(item id, delivery id, accepted) of every request for ``job_id``."""
        out = []
        for r in self.server.requests:
            body = json.loads(r.body or b"{}")
            item = body.get("payload", {}).get("item_id")
            if body.get("job_id") == job_id and item is not None:
                out.append((item, r.header("X-Nexopoll-Delivery-Id"), True))
        return out


class LogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += logging.Formatter().formatException(record.exc_info)
        self.texts.append(text)


class Pipeline(RuleBasedStateMachine):
    receiver: Receiver
    logs: LogCapture
    tmp_path = None

    def __init__(self) -> None:
        super().__init__()
        self.job = f"sm{next(_examples)}"
        self.redis = get_redis()
        self.redis.flushall()
        self.receiver.failing = False
        self.published: list[int] = []
        self.next_id = 1
        self.now = timezone.now()
        self.last_cursor = 0
        self.reset_epochs: list[int] = []  # the epoch each reset moved the state to
        self.max_per_tick = 3
        self.config = self.tmp_path / f"{self.job}.yaml"
        self._write(with_job=True)
        services.reload_config(now=self.now, path=self.config)

    # --- helpers --------------------------------------------------------------
    def _write(self, *, with_job: bool) -> None:
        jobs = []
        if with_job:
            jobs.append(
                {
                    "id": self.job,
                    "kind": "scripted",
                    "agent": "ana",
                    "schedule": {"every_secs": 60},
                    "config": {
                        "deliver": {"channel": "webhook", "to": "ops"},
                        "max_per_tick": self.max_per_tick,
                    },
                }
            )
        doc = {
            "pollers": {"default_jitter_ms": 0, "breaker_threshold": 50, "jobs": jobs},
            "agents": {
                "ana": {
                    "webhook": {
                        "url": self.receiver.server.url("/hook"),
                        "allow_private_networks": True,
                        "secret": f"${{{CANARY_VAR}}}",
                    }
                }
            },
        }
        self.config.write_text(yaml.safe_dump(doc, sort_keys=False))

    def _cursor(self) -> int | None:
        raw = PollState.objects.filter(job_id=self.job).values_list("cursor", flat=True).first()
        return None if raw is None else int(bytes(raw))

    def _queued_ids(self) -> list[str]:
        ids: list[str] = []
        while (raw := self.redis.lpop(QUEUE)) is not None:
            msg = json.loads(raw)
            if msg["headers"]["task"] == "nexopoll.deliver":
                ids += json.loads(base64.b64decode(msg["body"]))[0][0]
        return ids

    # --- rules ----------------------------------------------------------------
    @rule(n=st.integers(1, 4))
    def publish(self, n: int) -> None:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        self.published += ids
        self.redis.rpush(f"test:src:{self.job}", *ids)

    @rule()
    def tick(self) -> None:
        tick_job(self.job, now=self.now)

    @rule()
    def deliver_queued(self) -> None:
        ids = self._queued_ids()
        if ids:
            delivery.deliver_rows(ids, clock=lambda: self.now)

    @rule()
    def sweep(self) -> None:
        """The outbox sweeper: queues due rows whose message is not on its way."""
        outbox.sweep(now=self.now)

    @rule()
    def crash_between_commit_and_enqueue(self) -> None:
        """The worker died after the commit, before the enqueue: no deliver message was
        published and no row was marked as queued."""
        lost = self._queued_ids()
        Delivery.objects.filter(id__in=lost).update(enqueued_at=None)

    @rule()
    def flushall(self) -> None:
        self.redis.flushall()
        if self.published:  # the source is outside nexopoll's Redis: it keeps its items
            self.redis.rpush(f"test:src:{self.job}", *self.published)

    def _advance(self, seconds: float) -> None:
        """Time passes: the workers' clock (``now``) and, for the stamps the DB writes
        with its own clock (queued-at, claims), as if the DB's clock moved too."""
        step = timedelta(seconds=seconds)
        self.now += step
        rows = Delivery.objects.filter(job_id=self.job)
        rows.filter(enqueued_at__isnull=False).update(enqueued_at=F("enqueued_at") - step)
        rows.filter(claimed_until__isnull=False).update(claimed_until=F("claimed_until") - step)

    @rule(seconds=st.sampled_from([1, 6, 30, 120, "past the requeue delay"]))
    def clock_moves_on(self, seconds) -> None:
        """A message Redis lost (FLUSHALL) is replaced once the requeue delay passed."""
        if seconds == "past the requeue delay":
            seconds = requeue_after().total_seconds() + 1
        self._advance(seconds)

    @rule(failing=st.booleans())
    def receiver_fails(self, failing: bool) -> None:
        self.receiver.failing = failing

    @rule(change=st.sampled_from(["same", "changed", "removed_and_readded"]))
    def reload(self, change: str) -> None:
        before = self._cursor()
        if change == "changed":
            self.max_per_tick = 2 if self.max_per_tick == 3 else 3
        if change == "removed_and_readded":
            self._write(with_job=False)
            services.reload_config(now=self.now, path=self.config)
        self._write(with_job=True)
        services.reload_config(now=self.now, path=self.config)
        assert self._cursor() == before, f"reload ({change}) lost the cursor: {before}"

    @rule()
    def pause(self) -> None:
        services.pause_job(self.job)

    @rule()
    def resume(self) -> None:
        services.resume_job(self.job)

    @rule()
    def reset(self) -> None:
        services.reset_job(self.job)
        self.reset_epochs.append(PollState.objects.get(job_id=self.job).epoch)
        self.last_cursor = 0

    @rule(skew=st.sampled_from([-300, 300]), rate=st.sampled_from([30.0, 7.0]))
    def clock_skew_in_the_limiter(self, skew: int, rate: float) -> None:
        """Two workers hammer one bot's rate limit, one with its clock ``skew`` s off
        (time-machine moves this process's clocks; Redis keeps the true time). Turns
        are spaced ``1 / rate`` apart by Redis' clock and never granted without being
        taken: n turns granted between two Redis times t0 and t1 span (n - 1) / rate."""
        import time

        import time_machine

        from nexopoll.runtime import ratelimit

        def redis_ms() -> float:
            sec, usec = self.redis.time()
            return sec * 1000 + usec / 1000

        skewed = time_machine.travel(timezone.now() + timedelta(seconds=skew), tick=True)
        bot, granted = f"bot:{self.job}:{next(_examples)}", 0
        t0, end = redis_ms(), time.monotonic() + 0.15
        i = 0
        while time.monotonic() < end:
            if i % 2:
                skewed.start()
            try:
                limits = [(bot, rate), (f"chat:{bot}:{i % 60}", 1.0)]
                granted += ratelimit.acquire(self.redis, "telegram", limits) == 0
            finally:
                if i % 2:
                    skewed.stop()
            i += 1
        t1 = redis_ms()
        most = (t1 - t0) * rate / 1000 + 1 + 1e-3
        assert 1 <= granted <= most, f"{granted} turns in {t1 - t0:.1f} ms at {rate}/s"

    def _tick_a_held(self) -> tuple[threading.Thread, dict]:
        """Tick A in a thread, stopped at its barrier in the poller until the rule deletes
        ``test:hold:<job>``; returns A's thread and the dict its report lands in (``"a"``)."""
        r, job = self.redis, self.job
        r.delete(f"test:blocked:{job}")
        r.set(f"test:block_once:{job}", 1)
        r.set(f"test:hold:{job}", 1)
        result = {}

        def tick_a() -> None:
            try:
                result["a"] = tick_job(job, now=self.now)
            finally:
                from django.db import connection

                connection.close()

        a = threading.Thread(target=tick_a)
        a.start()
        return a, result

    def _at_barrier(self, a: threading.Thread) -> bool:
        """Waits until tick A is at its barrier (True) or has ended without reaching it."""
        job = self.job
        wait_for(
            lambda: self.redis.get(f"test:blocked:{job}") or not a.is_alive(),
            20,
            what="A at barrier",
        )
        return a.is_alive()

    @precondition(lambda self: not PollState.objects.get(job_id=self.job).paused)
    @rule()
    def lease_expires_under_a_running_tick(self) -> None:
        """Tick A waits at its barrier; its lease key goes (expiry); tick B takes over and
        commits; A, released, must not commit."""
        r, job = self.redis, self.job
        a, result = self._tick_a_held()
        try:
            if not self._at_barrier(a):  # A did not reach the poller (breaker open): no race
                return
            r.delete(lease_key(job))
            b = tick_job(job, now=self.now)
        finally:
            r.delete(f"test:hold:{job}")
            a.join(30)
        assert not a.is_alive()
        assert b.committed, b
        assert not result["a"].committed, f"the expired tick committed: {result['a']}"

    @precondition(lambda self: not PollState.objects.get(job_id=self.job).paused)
    @rule()
    def batch_with_a_stalled_mate(self) -> None:
        """The job ticks in a batch behind a mate that hangs in its poller (past its
        deadline): the job's tick must end (commit, lease released, history) while the
        mate still hangs, not after it (RELIABILITY.md row 52)."""
        from nexopoll.runtime.history import list_key
        from nexopoll.runtime.lease import running_key
        from nexopoll.runtime.tick import batch as tick_batch
        from nexopoll.tasks import requeue_tick

        r, job, mate = self.redis, self.job, f"{self.job}-mate"
        if r.exists(running_key(job)):  # an unfinished tick: the batch hands it back
            return
        doc = yaml.safe_load(self.config.read_text())
        mate_spec = {**json.loads(json.dumps(doc["pollers"]["jobs"][0])), "id": mate}
        doc["pollers"]["jobs"] = [*doc["pollers"]["jobs"], mate_spec]
        with_mate = self.config.with_name(f"{self.job}-batch.yaml")
        with_mate.write_text(yaml.safe_dump(doc, sort_keys=False))
        services.reload_config(now=self.now, path=with_mate)
        for key in ("block_once", "hold", "ignore_cancel"):
            r.set(f"test:{key}:{mate}", 1)
        r.delete(f"test:blocked:{mate}")
        entries = r.llen(list_key(job))
        result: dict = {}

        def batch() -> None:
            try:
                result["r"] = tick_batch.run_batch(
                    [(mate, 30_000), (job, 30_000)], clock=lambda: self.now, requeue=requeue_tick
                )
            finally:
                from django.db import connection

                connection.close()

        t = threading.Thread(target=batch)
        t.start()
        try:
            wait_for(
                lambda: r.get(f"test:blocked:{mate}") or not t.is_alive(), 20, what="the mate hangs"
            )
            if r.get(f"test:blocked:{mate}"):  # it hangs: the job's tick must not wait for it
                wait_for(
                    lambda: r.llen(list_key(job)) > entries,
                    20,
                    what="the job's tick ended beside its stalled mate",
                )
                assert t.is_alive() and not r.exists(lease_key(job))
        finally:
            r.delete(f"test:hold:{mate}", f"test:ignore_cancel:{mate}")
            t.join(30)
        assert not t.is_alive()
        mine = [x for x in result["r"] if x.job_id == job]
        assert mine and not mine[0].takeover, result["r"]

    # --- leases and fencing: lost Redis replies, operator writes mid-tick ------------
    @rule()
    def acquire_reply_lost(self) -> None:
        """RELIABILITY row 53: Redis runs the tick's lease acquire but its reply is lost
        (the connection cut); redis-py sends it again. The tick is not skipped as "lease
        busy", and leaves no lease, no crash marker and no takeover behind."""
        import redis as redis_py

        from nexopoll.runtime import lease
        from nexopoll.runtime import redis as rmod
        from tests.support.faultproxy import FaultProxy

        r, job = self.redis, self.job
        if r.exists(lease_key(job)):
            return  # a lease some other rule left is not this rule's to judge
        port = r.connection_pool.connection_kwargs["port"]
        proxy = FaultProxy(port).start()
        lossy = redis_py.Redis.from_url(proxy.url, decode_responses=True, retry=rmod.RETRY)
        lossy.script_load(lease._ACQUIRE)
        original = rmod._client
        try:
            rmod._client = lossy
            proxy.cut_after_request(f"nexopoll:lease:{job}".encode())
            report = tick_job(job, now=self.now)
        finally:
            rmod._client = original
            lossy.close()
            proxy.stop()
        assert proxy.cuts == 1
        assert report.reason != "lease busy" and not report.takeover, report
        assert not r.exists(lease_key(job), lease.running_key(job)), "orphan lease"

    @precondition(lambda self: not PollState.objects.get(job_id=self.job).paused)
    @rule(
        verb=st.sampled_from(["pause", "resume", "reset", "reload"]),
        failing=st.booleans(),
    )
    def operator_writes_during_a_tick(self, verb: str, failing: bool) -> None:
        """RELIABILITY row 54: tick A waits at its barrier (and fails when let go, if
        ``failing``) while an operator writes the job's state: A must not commit, and
        the operator's write holds."""
        r, job = self.redis, self.job
        a, result = self._tick_a_held()
        try:
            if not self._at_barrier(a):  # A did not reach the poller (breaker open): no race
                return
            if failing:
                r.set(f"test:mode:{job}", "transient")
            if verb == "reload":
                self.max_per_tick = 2 if self.max_per_tick == 3 else 3
                self._write(with_job=True)
                services.reload_config(now=self.now, path=self.config)
            else:
                getattr(services, f"{verb}_job")(job)
            if verb == "reset":
                self.reset_epochs.append(PollState.objects.get(job_id=job).epoch)
                self.last_cursor = 0
        finally:
            r.delete(f"test:hold:{job}")
            a.join(30)
            r.delete(f"test:mode:{job}")
        assert not a.is_alive()
        assert result["a"].status == "fenced" and not result["a"].committed, result["a"]
        s = PollState.objects.get(job_id=job)
        if verb == "resume":
            assert s.consecutive_errors == 0 and s.breaker_open_until is None and not s.paused
        if verb == "pause":
            assert s.paused
        if verb == "reset":
            assert s.cursor is None and s.consecutive_errors == 0

    # --- invariants -------------------------------------------------------------
    def _generation(self, epoch: int) -> int:
        return sum(1 for e in self.reset_epochs if e <= epoch)

    @invariant()
    def cursor_never_moves_backwards(self) -> None:
        cursor = self._cursor() or 0
        assert cursor >= self.last_cursor, f"cursor went back: {self.last_cursor} -> {cursor}"
        self.last_cursor = cursor

    @invariant()
    def no_item_lost(self) -> None:
        cursor = self._cursor() or 0
        rows = Delivery.objects.filter(job_id=self.job, purpose="item")
        alive = {r.payload["item_id"] for r in rows if r.status in ("sent", "pending", "held")}
        lost = [i for i in self.published if i <= cursor and i not in alive]
        assert not lost, f"items the cursor passed without a live delivery row: {lost}"

    @invariant()
    def duplicates_only_under_one_delivery_id(self) -> None:
        rows = list(Delivery.objects.filter(job_id=self.job, purpose="item"))
        per_generation: dict[tuple[int, int], list[str]] = {}
        for row in rows:
            key = (row.payload["item_id"], self._generation(row.epoch))
            per_generation.setdefault(key, []).append(str(row.id))
        doubled = {k: v for k, v in per_generation.items() if len(v) > 1}
        assert not doubled, f"one item got several delivery rows in one generation: {doubled}"
        by_id = {str(row.id): row.payload["item_id"] for row in rows}
        for item, delivery_id, _ in self.receiver.hits(self.job):
            assert by_id.get(delivery_id) == item, f"hit {delivery_id} for item {item}"

    @invariant()
    def no_secret_anywhere(self) -> None:
        dump = serializers.serialize(
            "json",
            [
                *PollJob.objects.filter(job_id=self.job),
                *PollState.objects.filter(job_id=self.job),
                *Delivery.objects.filter(job_id=self.job),
                *Agent.objects.all(),
            ],
        )
        assert CANARY not in dump
        assert not [t for t in self.logs.texts if CANARY in t]
        assert not [r for r in self.receiver.server.requests if CANARY.encode() in r.body]

    def teardown(self) -> None:
        """Everything the cursor passed reaches the receiver once the faults stop."""
        self.receiver.failing = False
        for _ in range(3):
            self.deliver_queued()
            self._advance(requeue_after().total_seconds() + 600)
            self.sweep()
            self.deliver_queued()
        cursor = self._cursor() or 0
        received = {item for item, _, _ in self.receiver.hits(self.job)}
        missing = [i for i in self.published if i <= cursor and i not in received]
        assert not missing, f"never delivered: {missing}"


@pytest.fixture
def pipeline(redis_client, transactional_db, tmp_path, monkeypatch, settings):
    monkeypatch.setenv(CANARY_VAR, CANARY)
    settings.NEXOPOLL_DELIVERY_MAX_ATTEMPTS = 10_000  # failures retry, never dead-letter
    receiver = Receiver()
    receiver.server.start()
    capture = LogCapture()
    root = logging.getLogger()
    root.addHandler(capture)
    old_level = root.level
    root.setLevel(logging.DEBUG)
    Pipeline.receiver, Pipeline.logs, Pipeline.tmp_path = receiver, capture, tmp_path
    try:
        yield Pipeline
    finally:
        root.removeHandler(capture)
        root.setLevel(old_level)
        receiver.server.stop()


def test_the_pipeline_keeps_its_invariants_under_interleaved_faults(pipeline):
    run_state_machine_as_test(
        pipeline,
        settings=settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            database=None,  # no .hypothesis/ folder left behind
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
