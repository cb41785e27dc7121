"""What the bench parts share: results folder, rounds and batch size, the job databases,
publishing task messages and draining them through one worker."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from .stack import Stack, pg_drop, wait_for, worker_args

RESULTS = Path(__file__).resolve().parent / "results"
SYNCED = "nexopoll:redbeat:nexopoll:synced"  # beat writes it once it mirrored the DB
ROUNDS = 3  # worker part: ticks per job
BATCH = 50  # worker part, batched row: jobs per nexopoll.tick_batch (NEXOPOLL_BATCH_SIZE)


class JobDBs:
    """DBs (SQLite files or PostgreSQL template databases) with N noop (or, with ``url``,
    webhook_poll) jobs every I s, reloaded once each and then copied per stack."""

    def __init__(self, template: Path | str) -> None:
        self.template = template
        self.cache: dict[tuple, Path | str] = {}
        self.reload_secs: dict[str, float] = {}

    def get(
        self,
        n: int,
        every: float,
        url: str = "",
        limits: dict | None = None,
        hosts: int = 1,
        kind: str = "webhook_poll",
    ) -> Path | str:
        key = (n, every, url, json.dumps(limits), hosts, kind)
        if key not in self.cache:
            stack = Stack(self.template)
            try:
                label = f"{n}{' ' + kind if url else ''}@{every:g}s"
                self.reload_secs[label] = stack.load_jobs(n, every, url, limits, hosts, kind)
                self.cache[key] = stack.snapshot(f"jobs-{n}-{every:g}")
            finally:
                stack.close()
        return self.cache[key]

    def close(self) -> None:
        for db in [*self.cache.values(), self.template]:
            if isinstance(db, str):
                pg_drop(db)


def pct(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def publish(stack: Stack, name: str, calls: list[tuple[list, dict]]) -> None:
    app = stack.app()
    with app.producer_or_acquire() as producer:
        for args, kwargs in calls:
            app.send_task(name, args=args, kwargs=kwargs, producer=producer)


def drain(
    stack: Stack,
    m: int,
    include: str = "",
    warm: int = 1,
    concurrency: int = 1,
    pool: str = "prefork",
) -> dict[str, float]:
    """Start one worker on a queue of m messages; measure from the moment ``warm`` of
    them were consumed (caches filled, connections open) until drained."""
    args = worker_args(concurrency, "drain", include, pool)
    worker = stack.start("worker", args, "drain")
    wait_for(lambda: stack.queued() <= m - warm or not worker.alive(), 120, 0.002, "warm-up")
    t0, cpu0, left = time.monotonic(), worker.cpu(), stack.queued()
    done = wait_for(
        lambda: (stack.queued() == 0 and stack.unacked() == 0) or not worker.alive(),
        600,
        0.01,
        "queue drained",
    )
    t1, cpu1, rss = time.monotonic(), worker.cpu(), worker.rss()
    assert done and worker.alive(), f"worker died:\n{worker.text()[-2000:]}"
    worker.stop()
    secs, cpu = t1 - t0, cpu1 - cpu0
    return {
        "tasks": left,
        "secs": secs,
        "cpu_s": cpu,
        "cpu_ms_per_task": 1000 * cpu / left,
        "tasks_per_s": left / secs,
        "rss_mb": rss,
    }
