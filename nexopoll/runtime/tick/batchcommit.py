"""A batch's commits, in waves (``batch.py``): its ticks commit as they finish.

While every tick of a batch runs on the batch's own thread, one after another, their
writes wait and commit together, in one transaction (one wave). Once a tick stalls,
or the batch has polled all it polls on its own thread, a thread *pumps* the waves:
what finished commits at once, and every tick that finishes later commits as soon as
it finishes, together with the others that finished while a commit ran (the next
wave). So a stalled tick never holds back its mates' commits, deliveries or lease
releases. The pump is the batch's own thread once it has nothing left to poll (the
worker's thread, with the DB connection it keeps), or the watchdog while a tick
stalls that thread; the poll threads only poll, so they open no DB connection per
commit (a connection per wave was a PostgreSQL backend started and ended each time).

Each wave: the leases checked (one round trip extends those past half their TTL; a
lease older than its TTL never commits) → one transaction for the wave's fenced
writes → deliveries handed to the queue → leases released, history appended and
metrics counted in one round trip → retries queued. The poller's after-commit hooks
run on the poll threads, so a slow one (gmail's mark-read) delays no delivery.

A commit whose reply was lost (the connection died after COMMIT was sent) is read
back: a tick whose write is in the DB is committed, not "fenced". Any exception at
commit rolls the wave back; each tick then commits alone and a tick whose own write
fails records the failure (``failures.commit_failed``). Leases and crash markers are
released whatever happens.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from django.db import connections

import nexopoll.runtime.tick.commit as tickcommit
import nexopoll.runtime.tick.failures as failures
import nexopoll.runtime.tick.record as record
import nexopoll.runtime.tick.run as run
from nexopoll.core.decide import Decision
from nexopoll.core.redact import redact

from .. import lease, logredact, metricstore, store
from ..history import record_many
from ..host import run_after_commit
from ..secretenv import secret_env
from .report import TickReport, TickRun, describe, enqueue_deliveries, skipped

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger("nexopoll.tick")

# how long a pump sleeps between checks of its end condition when nothing finished
PUMP_WAIT_SECS = 0.05


@dataclass
class Ran:
    """A tick that ran and waits for its wave's commit."""

    t: TickRun
    report: TickReport
    decision: Decision
    write: store.TickWrite


@dataclass
class _Done:
    job_id: str
    at: datetime  # when its tick started: its history entry's time
    result: Ran | TickReport


class Waves:
    """The batch's finished ticks on their way to the DB (see the module docstring)."""

    def __init__(
        self,
        client,
        held: dict[str, lease.Lease],
        busy: list[str],
        retry: Callable[[list[TickReport]], None],
        pool: Callable[[], object],
    ) -> None:
        self._client, self._held, self._retry, self._pool = client, held, retry, pool
        self._busy = busy  # skipped for a busy lease: counted with the first wave
        self._cond = threading.Condition()
        self._pending: list[_Done] = []
        self._reports = {job_id: skipped(job_id, "lease busy") for job_id in busy}
        self._hooks: list[Future] = []

    def add(self, job_id: str, at: datetime, result: Ran | TickReport) -> None:
        """A tick finished: it commits with the next wave (the pump's, once one runs)."""
        with self._cond:
            self._pending.append(_Done(job_id, at, result))
            self._cond.notify_all()

    def poke(self) -> None:
        """Wake a pump to check its end condition again."""
        with self._cond:
            self._cond.notify_all()

    def pump(self, until: Callable[[], bool]) -> None:
        """Commit, on this thread, what finished and every tick as it finishes, wave by
        wave, until ``until()`` holds with nothing left to commit."""
        while True:
            with self._cond:
                while not self._pending and not until():
                    self._cond.wait(PUMP_WAIT_SECS)
                if not self._pending:
                    return
            self.drain()

    def close(self) -> list[TickReport]:
        """Commit what is left (every tick has finished), release any lease still held,
        wait for the after-commit hooks; every report of the batch."""
        with self._cond:
            for job_id in set(self._held) - self._reported():  # no tick reported it
                report = TickReport(job_id, "transient", reason="internal error")
                self._pending.append(_Done(job_id, datetime.now(UTC), report))
        self.drain()
        if self._busy:  # no tick ran here: the skipped ones are counted all the same
            self._release([], {})
        for future in self._hooks:
            future.exception()  # wait: the batch ends after its ticks' hooks
        return list(self._reports.values())

    def _reported(self) -> set[str]:
        return set(self._reports) | {d.job_id for d in self._pending}

    def drain(self) -> None:
        """Commit what finished so far, on this thread (no pump may run meanwhile)."""
        while True:
            with self._cond:
                wave, self._pending = self._pending, []
            if not wave:
                return
            try:
                self._wave(wave)
            except Exception:  # never leave the batch waiting on a commit that died
                log.exception("tick.batch_wave_failed jobs=%s", len(wave))

    def _wave(self, wave: list[_Done]) -> None:
        out = {d.job_id: d.result for d in wave if not isinstance(d.result, Ran)}
        ran = [d.result for d in wave if isinstance(d.result, Ran)]
        hooks: list = []
        try:
            commit(ran, hooks, out)  # fills ``out`` as it goes: a late error keeps those
        except Exception:
            log.exception("tick.batch_commit_crashed ticks=%s", len(ran))
            for r in ran:  # what did not report yet: not committed, as far as we know
                if r.t.job.job_id not in out:
                    report = TickReport(r.t.job.job_id, "transient", reason="internal error")
                    run.ended(r.t, report)
                    out[r.t.job.job_id] = report
        finally:
            self._release(wave, out)
            self._reports.update(out)
        for job_id, callbacks in hooks:
            self._hooks.append(self._pool().submit(_run_hooks, job_id, callbacks))
        self._retry(list(out.values()))

    def _release(self, wave: list[_Done], out: dict[str, TickReport]) -> None:
        """Release the wave's leases, append its history entries and count its metrics,
        in one round trip."""
        busy, self._busy = self._busy, []
        try:
            entries = [
                record.history_entry(out[d.job_id], d.at, self._held[d.job_id])
                for d in wave
                if d.job_id in self._held and d.job_id in out
            ]
            pipe = self._client.pipeline(transaction=False)
            metricstore.queue_skipped(pipe, busy)
            record_many(self._client, entries, pipe=pipe)
        except Exception:  # the leases expire on their own; never mask the ticks' results
            log.warning("lease.release_failed batch=%s", len(wave), exc_info=True)


def _run_hooks(job_id: str, callbacks: list) -> None:
    try:
        run_after_commit(job_id, callbacks)
    finally:
        connections.close_all()  # a poll thread's connection, if a hook used one


def commit(
    ran: list[Ran], hooks: list, out: dict[str, TickReport] | None = None
) -> dict[str, TickReport]:
    """One wave: the ticks whose leases hold commit in one transaction; on any error,
    each tick alone (a tick whose commit landed, its reply lost, counts as committed)."""
    out = {} if out is None else out
    if not ran:
        return out
    kept = failures.leases_kept([r.t.held for r in ran if r.t.held is not None])
    for r in ran:
        if r.t.held is not None and r.t.job.job_id not in kept:
            out[r.t.job.job_id] = _ended(r, failures.lease_lost(r.t))
    ran = [r for r in ran if r.t.job.job_id not in out]
    try:
        fenced = store.commit_ticks([r.write for r in ran]) if ran else set()
    except Exception as exc:
        store.drop_if_unusable()
        landed = failures.landed(exc, [r.write for r in ran])
        log.warning(
            "tick.batch_commit_failed ticks=%s (%s): committing each alone",
            len(ran),
            type(exc).__name__,
        )
        for r in ran:
            job_id = r.t.job.job_id
            if job_id in landed:
                tickcommit.committed(r.t, r.report, r.decision, enqueue=False, hooks=hooks)
                out[job_id] = _ended(r, r.report)
            else:
                out[job_id] = _ended(
                    r, tickcommit.commit_staged(r.t, r.write, r.report, r.decision, hooks)
                )
        _enqueue([r for r in ran if r.t.job.job_id in landed])
        return out
    for r in ran:
        if r.t.job.job_id in fenced:
            out[r.t.job.job_id] = _ended(r, tickcommit.fenced(r.t))
        else:
            tickcommit.committed(r.t, r.report, r.decision, enqueue=False, hooks=hooks)
            out[r.t.job.job_id] = _ended(r, r.report)
    _enqueue([r for r in ran if r.report.committed])
    return out


def _ended(r: Ran, report: TickReport) -> TickReport:
    run.ended(r.t, report)
    return report


def _enqueue(ran: list[Ran]) -> None:
    """Hand the committed rows of a wave to the queue, in one call."""
    ids = [i for r in ran for i in r.report.delivery_ids]
    if ids:
        enqueue_deliveries(ids)


def internal_error(job_id: str, exc: BaseException, t: TickRun | None) -> TickReport:
    """A bug in one tick (outside its poller): transient, its text redacted like any."""
    secrets = t.job.secret_values(secret_env()) if t is not None else logredact.known()
    error = redact(describe(exc), secrets)
    return TickReport(job_id, "transient", reason="internal error", error=error)
