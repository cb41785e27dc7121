"""Bench part 3: scheduling lag of N no-op jobs on the real stack (see bench/run.py)."""

from __future__ import annotations

import math
import statistics
import time
from datetime import timedelta
from typing import Any

from nexopoll.core.schedule import EverySchedule, stagger_offset

from .common import SYNCED, JobDBs, pct
from .noop import TICKS_KEY
from .stack import (
    NEXO_SCHEDULER,
    Stack,
    beat_args,
    wait_for,
    worker_args,
)


def offsets(stack: Stack, every: float) -> dict[str, float]:
    sched = EverySchedule(timedelta(seconds=every))
    return {
        jid: stagger_offset(jid, timedelta(milliseconds=jitter), sched).total_seconds()
        for jid, jitter in stack.sql("SELECT job_id, jitter_ms FROM poll_job")
    }


def lag_stats(
    records: list[tuple[str, float]], offs: dict[str, float], every: float, t0: float, t1: float
) -> dict[str, Any]:
    """Lag of ticks started in [t0, t1) and the fraction of slots in [t0, t1) that ran."""
    lags, ran = [], set()
    for jid, ts in records:
        o = offs[jid]
        slot = math.floor((ts - o) / every) * every + o
        if t0 <= ts < t1:
            lags.append(1000 * (ts - slot))
        if t0 <= slot < t1:
            ran.add((jid, round(slot, 3)))
    due = sum(_slots_between(o, every, t0, t1) for o in offs.values())
    return {
        "ticks": len(lags),
        "due": due,
        "ran_per_due": len(ran) / due if due else math.nan,
        "lag_p50_ms": pct(lags, 0.5),
        "lag_p99_ms": pct(lags, 0.99),
        "lag_max_ms": max(lags, default=math.nan),
        "lag_mean_ms": statistics.fmean(lags) if lags else math.nan,
        "lags_ms": lags,  # popped by the caller: the PNG histogram, not the JSON
    }


def _slots_between(offset: float, every: float, t0: float, t1: float) -> int:
    first = math.ceil((t0 - offset) / every)
    last = math.ceil((t1 - offset) / every)  # slots k*every+offset < t1
    return max(0, last - first)


def part_lag(
    dbs: JobDBs,
    n: int,
    every: float,
    duration: float,
    pool: str = "prefork",
    c: int = 2,
    warm: float | None = None,
) -> dict[str, Any]:
    stack = Stack(dbs.get(n, every), BENCH_RECORD_TICKS="1")
    try:
        worker = stack.start("worker", worker_args(c, "lag", pool=pool), "lag")
        beat = stack.start("beat", beat_args(NEXO_SCHEDULER, stack.dir), "beat")
        wait_for(lambda: stack.redis.client().exists(SYNCED) or not beat.alive(), 120, 0.05, "beat")
        time.sleep(every if warm is None else warm)  # warm-up: one interval
        t0, wcpu0, bcpu0 = time.time(), worker.cpu(), beat.cpu()
        depth = []
        while time.time() < t0 + duration:
            depth.append(stack.queued())
            time.sleep(1)
        t1, wcpu1, bcpu1 = time.time(), worker.cpu(), beat.cpu()
        rss = {"worker": worker.rss(), "beat": beat.rss()}
        time.sleep(2)  # grace: ticks of slots just before t1 still record
        raw = stack.r.lrange(TICKS_KEY, 0, -1)
        records = [(jid, float(ts)) for jid, ts in (r.split() for r in raw)]
        res = lag_stats(records, offsets(stack, every), every, t0, t1)
        ((not_ok,),) = stack.sql(
            "SELECT COUNT(*) FROM poll_state WHERE last_status IS NOT NULL AND last_status != 'ok'"
        )
        res.update(window_figures(res, n, every, t1 - t0, depth, wcpu1 - wcpu0, bcpu1 - bcpu0))
        res.update(
            jobs_not_ok=not_ok,
            rss_mb=rss,
            pool=f"{pool} -c {c}",
            workers_alive=worker.alive() and beat.alive(),
        )
        return res
    finally:
        stack.close()


def window_figures(
    res: dict, n: int, every: float, secs: float, depth: list[int], worker_s: float, beat_s: float
) -> dict[str, Any]:
    """A lag row's rates, queue depths and CPU shares over its window of ``secs``."""
    return {
        "n": n,
        "every": every,
        "secs": secs,
        "ticks_per_s": res["ticks"] / secs,
        "due_per_s": n / every,
        "queue_max": max(depth),
        "queue_end": depth[-1],
        "worker_cpu_pct": 100 * worker_s / secs,
        "beat_cpu_pct": 100 * beat_s / secs,
    }
