"""Bench part 2: beat CPU per dispatch, stock RedBeat against nexopoll's scheduler
(see bench/run.py)."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from celery.schedules import schedule as every_schedule
from redbeat.schedulers import RedBeatSchedulerEntry

from .common import JobDBs
from .stack import (
    NEXO_SCHEDULER,
    STOCK_SCHEDULER,
    Stack,
    beat_args,
    wait_for,
)


def stock_entries(stack: Stack, n: int, every: float) -> None:
    """n stock RedBeat entries, last run spread over the last interval so they phase-spread."""
    app, now = stack.app(), datetime.now(UTC)
    for i in range(n):
        RedBeatSchedulerEntry(
            f"bench-{i}",
            "bench.noop",
            every_schedule(run_every=every),
            app=app,
            last_run_at=now - timedelta(seconds=every * i / n),
        ).save()


def beat_window(stack: Stack, scheduler: str, duration: float, ready: str) -> dict[str, Any]:
    beat = stack.start("beat", beat_args(scheduler, stack.dir), "beat")
    wait_for(
        lambda: (ready in beat.text() and stack.queued() > 0) or not beat.alive(),
        120,
        0.05,
        "beat dispatching",
    )
    assert beat.alive(), f"beat died:\n{beat.text()[-2000:]}"
    time.sleep(5)  # warm-up: past start-up (and nexopoll's initial resync)
    q0, cpu0, t0 = stack.queued_ticks(), beat.cpu(), time.monotonic()
    time.sleep(duration)
    q1, cpu1, t1 = stack.queued_ticks(), beat.cpu(), time.monotonic()
    messages = stack.queued()
    mem = int(stack.r.info("memory")["used_memory"])
    beat.stop()
    dispatched, cpu = q1 - q0, cpu1 - cpu0
    return {
        "secs": t1 - t0,
        "dispatched": dispatched,
        "messages_at_end": messages,
        "cpu_s": cpu,
        "cpu_pct": 100 * cpu / (t1 - t0),
        "cpu_ms_per_dispatch": 1000 * cpu / dispatched if dispatched else math.nan,
        "redis_used_mb": mem / 2**20,
    }


def part_beat(template: Path, dbs: JobDBs, n: int, every: float, duration: float) -> dict:
    stock = Stack(template)
    try:
        stock_entries(stock, n, every)
        stock_res = beat_window(stock, STOCK_SCHEDULER, duration, ready="")
    finally:
        stock.close()
    nexo = Stack(dbs.get(n, every))
    try:
        nexo_res = beat_window(nexo, NEXO_SCHEDULER, duration, ready="")
    finally:
        nexo.close()
    due = n * duration / every
    for res in (stock_res, nexo_res):
        res["dispatched_per_due"] = res["dispatched"] / (n * res["secs"] / every)
    return {
        "n": n,
        "every": every,
        "duration": duration,
        "due_approx": due,
        "stock": stock_res,
        "nexopoll": nexo_res,
        "ratio": nexo_res["cpu_ms_per_dispatch"] / stock_res["cpu_ms_per_dispatch"],
    }
