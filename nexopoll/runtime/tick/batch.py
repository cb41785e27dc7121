"""Batched ticks: one task message for many jobs that fall due together.

Beat sends ``nexopoll.tick_batch`` when many jobs are due in the same loop (see
``beat.py``); at low rates every job keeps a ``nexopoll.tick`` message of its own.
A batch does what each of its ticks would do alone, with fewer round trips:

1. the leases of every job, in one pipelined Redis round trip;
2. their state rows, in one query;
3. each job's tick in turn, exactly as ``run.py`` runs it (epoch, breaker, crash
   cap, a deadline counted from when its lease was taken, the pure decision);
4. one transaction for the ticks' fenced writes (each UPDATE still compares and swaps
   on the version its tick read, so a fenced tick writes nothing and the others
   commit), then leases released, history appended and metrics counted in one more
   round trip. Once a tick stalls, the ticks commit in waves as they finish
   (``batchcommit.py``): a stalled tick never holds back its mates.

Per-job semantics stay those of a single tick. A busy lease skips that job alone.
Any error in a shared commit rolls it back and each tick then commits alone, so
one bad row never holds back the others. A transient failure is retried by a single
``nexopoll.tick`` message for that job. A job whose earlier tick never ended (its
crash marker says so) goes back to the queue as a single tick, so a tick that kills
its worker cannot make its batch-mates look like crashes.

A batch polls one job after another, which is the cheapest way for ticks that cost
CPU only. A poller that waits on the network must not hold the rest back: once a tick
has run for ``NEXOPOLL_BATCH_SLOW_MS``, or the batch for
``NEXOPOLL_BATCH_BUDGET_SECS``, the jobs not started yet poll side by side on the
process's poll threads (``NEXOPOLL_BATCH_THREADS``), as do the jobs whose last tick
was that slow. Beat sends such jobs in batches of their own (the slow set, see
``record.slow_mark``), whose jobs all poll side by side at once; the watchdog covers
the ticks of a quick batch before beat knows.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, connections

import nexopoll.runtime.tick.batchcommit as batchcommit
import nexopoll.runtime.tick.commit as commit
import nexopoll.runtime.tick.failures as failures
import nexopoll.runtime.tick.run as run

from .. import lease, store
from ..redis import get_redis
from .report import TickReport, TickRun, skipped

log = logging.getLogger("nexopoll.tick")


class _Work:
    """The batch's jobs not started yet. The batch's thread takes them one by one; once
    one stalls, the watchdog hands all the others to the shared poll threads at once,
    then commits what finishes (the batch's thread is held by the stalled tick)."""

    def __init__(
        self,
        job_ids: list[str],
        run: Callable[[str], None],
        pump: Callable[[Callable[[], bool]], None],
    ) -> None:
        self._left = deque(job_ids)
        self._lock = threading.Lock()
        self._run = run
        self._pump = pump  # commits what finishes, until its argument says stop
        self.began = self.job_began = time.monotonic()
        self.done = threading.Event()
        self.futures: list[Future] = []

    def next(self) -> str | None:
        with self._lock:
            if not self._left:
                return None
            self.job_began = time.monotonic()
            return self._left.popleft()

    def side_by_side(self, job_ids: list[str] | None = None, *, reserved: bool = False) -> int:
        """Run ``job_ids`` (default: every job not started yet) on the poll threads
        (``reserved``: their room already counted by ``_reserve``)."""
        with self._lock:
            if job_ids is None:
                job_ids = list(self._left)
                self._left.clear()
            for n, job_id in enumerate(job_ids):
                try:
                    self.futures.append(_submit(self._run, job_id, reserved=reserved))
                except BaseException:
                    if reserved:  # the ones not submitted give their room back
                        _release(len(job_ids) - n - 1)
                    raise
            return len(job_ids)

    def watch(self) -> None:
        """Once a tick has run longer than ``NEXOPOLL_BATCH_SLOW_MS`` (a poller waiting on
        the network) or the batch longer than its budget, stop taking jobs one by one:
        the rest poll side by side, and this thread commits what finishes until the
        batch's thread is free again."""
        slow = settings.NEXOPOLL_BATCH_SLOW_MS / 1000
        budget = settings.NEXOPOLL_BATCH_BUDGET_SECS
        while not self.done.wait(slow / 2):
            now = time.monotonic()
            if now - self.job_began > slow or now - self.began > budget:
                if n := self.side_by_side():
                    log.info("tick.batch_side_by_side jobs=%s", n)
                try:  # what finishes commits now, not after the stall: this thread
                    self._pump(self.done.is_set)  # pumps until the batch's thread is free
                finally:
                    connections.close_all()  # this thread's connection, if it committed
                return


_executor: tuple[int, int, ThreadPoolExecutor] | None = None  # pid, size, pool
_executor_lock = threading.Lock()
_polling = 0  # jobs handed to this process's poll threads and not finished yet
_room = threading.Condition(_executor_lock)  # notified as they finish
FEED_WAIT_SECS = 0.05  # a batch waiting for poll threads commits what finished this often
# jobs admitted per poll thread (polling, or queued for one): a short queue keeps the poll
# threads busy through a burst, a bounded one keeps a backlog in the broker
ADMIT_PER_THREAD = 4


def _submit(run: Callable[[str], None], job_id: str, *, reserved: bool = False) -> Future:
    """Run ``run(job_id)`` on the poll threads, counted in ``_polling`` until it ends
    (``reserved``: already counted by ``_reserve``)."""
    global _polling

    def counted() -> None:
        try:
            run(job_id)
        finally:
            _release(1)

    pool = _pool()
    if not reserved:
        with _room:
            _polling += 1
    try:
        return pool.submit(counted)
    except BaseException:
        _release(1)
        raise


def _release(n: int) -> None:
    global _polling
    with _room:
        _polling -= n
        _room.notify(n)  # one waiting batch per freed place (a herd would fight for it)


def _reserve(n: int, wait: float = 0.0) -> int:
    """Count up to ``n`` jobs in for the poll threads, as many as they have room for
    (``NEXOPOLL_BATCH_THREADS`` polling and ADMIT_PER_THREAD times that queued for
    them, at most), waiting up to ``wait`` seconds for room when there is none; return
    how many."""
    global _polling
    cap = ADMIT_PER_THREAD * max(1, settings.NEXOPOLL_BATCH_THREADS)
    with _room:
        if _polling >= cap and wait > 0:
            _room.wait(wait)
        granted = min(n, max(0, cap - _polling))
        _polling += granted
        return granted


def _feed(work: _Work, waves: batchcommit.Waves, job_ids: list[str], held: dict) -> list[str]:
    """Hand ``job_ids`` to the poll threads as they have room, committing what finishes
    meanwhile (on this thread); return the jobs still without room once a quarter of
    their leases' TTL has passed (their polls' deadlines count from the lease)."""
    left = deque(job_ids)
    give_up = min((held[job_id].deadline(0.25) for job_id in job_ids), default=0.0)
    while left:
        if n := _reserve(len(left), wait=FEED_WAIT_SECS):
            work.side_by_side([left.popleft() for _ in range(n)], reserved=True)
        elif time.monotonic() >= give_up:
            break
        else:
            waves.drain()  # what finished while this batch waited for room
    return list(left)


def _pool() -> ThreadPoolExecutor:
    """This process's poll threads (made after a fork, never inherited from the parent;
    made again, the old ones finishing what they run, if ``NEXOPOLL_BATCH_THREADS``
    changed)."""
    global _executor
    size = max(1, settings.NEXOPOLL_BATCH_THREADS)
    with _executor_lock:
        if _executor is None or _executor[:2] != (os.getpid(), size):
            if _executor is not None and _executor[0] == os.getpid():
                _executor[2].shutdown(wait=False)
            pool = ThreadPoolExecutor(size, thread_name_prefix="nexopoll-poll")
            _executor = (os.getpid(), size, pool)
        return _executor[2]


# queue one ``nexopoll.tick`` for a job (a spilled job, or a per-job retry):
# ``requeue(job_id, lease_ttl_ms, **apply_async_options)``; the task layer passes it in
Requeue = Callable[..., None]


def run_batch(
    items: list[tuple[str, int | None]], *, clock: Callable[[], datetime], requeue: Requeue
) -> list:
    """Tick every ``(job_id, lease_ttl_ms)`` of a batch; return one report per job that ran
    here (jobs handed back went to the queue as single ticks and have none)."""
    client = get_redis()
    items = [(job_id, ttl or run.default_lease_ttl_ms()) for job_id, ttl in items]
    ttls = dict(items)
    held = lease.try_acquire_many(client, items)
    busy = [job_id for job_id, _ in items if job_id not in held]
    waves = batchcommit.Waves(client, held, busy, lambda done: _retry(done, ttls, requeue), _pool)
    try:
        rows: dict | None = store.load_states(list(held))
    except DatabaseError as exc:
        now = clock()
        for job_id in held:
            waves.add(
                job_id, now, failures.db_unavailable(job_id, exc, now=now, where="before the tick")
            )
        rows = None
    rows, loaded = rows or {}, rows is not None
    # a job with a tick that never ended (a crash?) runs alone: see the module docstring
    alone = [job_id for job_id, got in held.items() if job_id in rows and got.unfinished]
    _hand_back(client, [held.pop(job_id) for job_id in alone], ttls, requeue)

    def run_one(job_id: str, *, inline: bool = False) -> None:
        now = clock()
        try:
            # its commit waits for the batch's wave, or the pump's next one
            waves.add(job_id, now, _tick_one(job_id, rows.get(job_id), now, held[job_id]))
        finally:
            if not inline:
                connections.close_all()  # a poll thread's DB access (a cache miss, a trial)

    # a job whose last tick waited on the network polls on the poll threads at once
    order = [job_id for job_id, _ in items if job_id in held and loaded]
    slow = settings.NEXOPOLL_BATCH_SLOW_MS
    waits = [j for j in order if rows.get(j) and (rows[j]["last_latency_ms"] or 0) > slow]
    work = _Work([j for j in order if j not in set(waits)], run_one, waves.pump)
    watchdog = threading.Thread(target=work.watch, daemon=True)
    try:
        try:
            if late := _feed(work, waves, waits, held):
                # no room before a quarter of their leases ran out: back to the queue as
                # single ticks, where the broker keeps the backlog (and drops what
                # expires), not this process
                log.info("tick.batch_poll_threads_full handed_back=%s", len(late))
                _hand_back(client, [held.pop(job_id) for job_id in late], ttls, requeue)
            watchdog.start()
            while (job_id := work.next()) is not None:
                run_one(job_id, inline=True)
        finally:
            work.done.set()
            waves.poke()  # a watchdog pumping commits stops at once: this thread takes over
            if watchdog.is_alive():
                watchdog.join()
        # what ran commits now; a tick still polling (on the poll threads) as it finishes
        for future in work.futures:
            future.add_done_callback(lambda _: waves.poke())
        waves.pump(lambda: all(future.done() for future in work.futures))
    finally:
        for future in work.futures:
            future.exception()  # wait; run_one() keeps every tick's failure to that tick
        reports = waves.close()
    return reports


def _tick_one(job_id: str, row, now: datetime, held: lease.Lease) -> batchcommit.Ran | TickReport:
    """Run one job's tick up to its commit; a failure of this job stays this job's."""
    t: TickRun | None = None
    report = TickReport(job_id, "fenced")
    try:
        if held.age_ms() > held.ttl_ms / 2 and not failures.leases_kept([held]):
            return TickReport(job_id, "fenced", reason="lease lost before the tick")
        prepared = run.prepare(job_id, row, now=now, held=held)
        if isinstance(prepared, TickReport):
            if prepared.reason == "paused":
                run.park(job_id)
            return prepared
        t = prepared
        report.epoch = t.epoch
        if t.trial and not run.take_epoch(t, manual=False):
            return skipped(job_id, "another tick took the epoch")
        report, decision, ack, latency_ms = run.execute(t)
        write = commit.stage(t, report, decision, ack, latency_ms, check_lease=False)
        if not isinstance(write, store.TickWrite):
            report = write
            return report
        ran = batchcommit.Ran(t, report, decision, write)
        t = None  # its end comes after its wave's commit
        return ran
    except DatabaseError as exc:
        report = failures.db_unavailable(job_id, exc, now=now, where="before the tick")
        return report
    except Exception as exc:  # a bug in one tick must not stop the batch
        log.exception("tick.failed job=%s", job_id)
        report = batchcommit.internal_error(job_id, exc, t)
        return report
    finally:
        if t is not None:
            run.ended(t, report)


def _hand_back(client, leases: list[lease.Lease], ttls: dict[str, int], requeue: Requeue) -> None:
    """Give back leases of jobs this batch will not run, and queue those jobs as single
    ticks (their crash markers keep the count they had before the batch took them)."""
    if not leases:
        return
    try:
        lease.hand_back_many(client, leases)
    except Exception:  # they expire on their own; the single ticks then find them free
        log.warning("lease.hand_back_failed jobs=%s", len(leases), exc_info=True)
    for got in leases:
        requeue(got.job_id, ttls[got.job_id])


def _retry(reports, ttls: dict[str, int], requeue: Requeue) -> None:
    """Each failed tick retries alone, as the single task would retry it."""
    for report in reports:
        ttl = ttls[report.job_id]
        if report.db_error:  # nothing committed: soon, while that lands before the next slot
            at = datetime.now(UTC) + timedelta(seconds=0.5)
            if report.next_slot_at is None or at < report.next_slot_at:
                requeue(report.job_id, ttl, countdown=0.5, retries=1)
        elif report.retry_at is not None and report.committed:
            requeue(report.job_id, ttl, eta=report.retry_at, retries=1)
