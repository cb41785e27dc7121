"""What a tick is and what it ends with: ``TickRun`` (one running tick's inputs, built by
``run.prepare``) and ``TickReport`` (its outcome), shared by every module of the tick."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nexopoll.core.decide import JobPolicy, StartState

from .. import lease, outbox
from ..definitions import JobDef
from ..host import PendingDelivery

log = logging.getLogger("nexopoll.tick")


@dataclass
class TickReport:
    job_id: str
    status: str  # ok | transient | permanent | skipped | fenced
    reason: str = ""
    # metrics (runtime/metricstore.py): it took over a lease whose tick never finished;
    # the poller's own metric_inc counts
    takeover: bool = False
    poller_metrics: dict = field(default_factory=dict)
    epoch: int | None = None
    items_seen: int = 0
    items_dispatched: int = 0
    deliveries: list[PendingDelivery] = field(default_factory=list)
    delivery_ids: list[str] = field(default_factory=list)
    next_cursor: bytes | None = None
    retry_at: datetime | None = None  # when Celery should retry a transient failure
    error: str = ""
    committed: bool = False
    after_commit: list = field(default_factory=list)  # the poller's post-commit side effects
    latency_ms: int | None = None
    start_cursor: bytes | None = None  # the cursor the tick started from (tick history, rewind)
    db_error: bool = False  # a transient DB error: retry soon (the task's backoff)
    next_slot_at: datetime | None = None
    prev_latency_ms: int | None = None  # the job's last tick before this one


@dataclass(kw_only=True)
class TickRun:
    """What one running tick knows: the job, the state it started from, its epoch
    (built by ``run.prepare``; ``take_epoch`` moves ``epoch``/``expect`` on)."""

    job: JobDef
    row: dict[str, Any]
    start: StartState
    policy: JobPolicy
    epoch: int
    crash_count: int
    now: datetime
    held: lease.Lease | None
    next_slot_at: datetime | None
    expect: int  # the row's epoch the commit compares and swaps on
    trial: datetime | None = None  # a half-open breaker trial starts now
    capped: bool = False  # the crash cap is reached: the poller is not called


def skipped(job_id: str, reason: str, epoch: int | None = None) -> TickReport:
    log.debug("tick.skipped job=%s reason=%s", job_id, reason)
    return TickReport(job_id, "skipped", reason=reason, epoch=epoch)


def describe(exc: BaseException, job_id: str | None = None) -> str:
    text = (str(exc) or type(exc).__name__)[:2000]
    if job_id and getattr(exc, "private_opt_in", False):  # a loopback/private address
        text += f"; to poll it, set `allow_private_networks: true` in jobs[{job_id}].config"
    return text


def enqueue_deliveries(ids: list[str]) -> None:
    """Hand committed outbox rows to the delivery task, marked as queued so the sweeper
    leaves them alone; the sweeper covers a failure here (rows left unmarked)."""
    outbox.enqueue(ids)
