"""Bench part 1: worker CPU per task, raw Celery no-op tasks against nexopoll ticks,
single and batched (see bench/run.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .common import BATCH, ROUNDS, JobDBs, drain, publish
from .stack import Stack, job_id


def part_worker(template: Path, dbs: JobDBs, m: int, concurrency: int = 1) -> dict[str, Any]:
    raw = Stack(template)
    try:
        publish(raw, "bench.noop", [([], {})] * m)
        raw_res = drain(raw, m, include="bench.rawtask", warm=m // ROUNDS, concurrency=concurrency)
    finally:
        raw.close()
    # m // ROUNDS jobs ticked ROUNDS times each, round-robin: the first round fills the
    # worker's per-job definition cache (as the first interval does in production) and
    # is left out of the measurement. With -c 1 ticks run one at a time: no lease is busy.
    jobs = m // ROUNDS
    nexo = Stack(dbs.get(jobs, 3600))
    try:
        calls = [([job_id(i % jobs)], {"lease_ttl_ms": 30000}) for i in range(jobs * ROUNDS)]
        publish(nexo, "nexopoll.tick", calls)
        nexo_res = drain(nexo, len(calls), warm=jobs, concurrency=concurrency)
        ((ticks, ok, other),) = nexo.sql(
            "SELECT SUM(ticks_total), SUM(CASE WHEN last_status = 'ok' THEN 1 ELSE 0 END), "
            "SUM(CASE WHEN last_status != 'ok' THEN 1 ELSE 0 END) FROM poll_state"
        )
        nexo_res.update(ticks_total=ticks, jobs=jobs, status_ok=ok, status_other=other)
    finally:
        nexo.close()
    batched = part_worker_batched(dbs, jobs)
    return {
        "m": m,
        "raw": raw_res,
        "nexopoll": nexo_res,
        "ratio": nexo_res["cpu_ms_per_task"] / raw_res["cpu_ms_per_task"],
        "batched": batched,
        "batched_ratio": batched["cpu_ms_per_tick"] / raw_res["cpu_ms_per_task"],
    }


def part_worker_batched(dbs: JobDBs, jobs: int) -> dict[str, Any]:
    """The same ticks as ``nexopoll.tick_batch`` messages of BATCH jobs (what beat sends
    when many jobs fall due together): CPU per tick, not per message."""
    nexo = Stack(dbs.get(jobs, 3600))
    try:
        ticks = [job_id(i % jobs) for i in range(jobs * ROUNDS)]
        calls = [
            ([[[j, 30000] for j in ticks[k : k + BATCH]]], {}) for k in range(0, len(ticks), BATCH)
        ]
        publish(nexo, "nexopoll.tick_batch", calls)
        res = drain(nexo, len(calls), warm=len(calls) // ROUNDS)
        ((total,),) = nexo.sql("SELECT SUM(ticks_total) FROM poll_state")
        res.update(
            batch=BATCH,
            ticks_total=total,
            ticks=res["tasks"] * BATCH,
            cpu_ms_per_tick=1000 * res["cpu_s"] / (res["tasks"] * BATCH),
        )
        return res
    finally:
        nexo.close()
