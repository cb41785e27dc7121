"""nexopoll benchmark: worker CPU per tick, beat CPU per dispatch, scheduling lag.

Run from the repo root: ``PYTHONPATH=. .venv/bin/python -m bench.run [--quick]
[--db postgres[://postgres@127.0.0.1:5432/PREFIX]] [--parts worker,beat,lag,io,big]``.
Every measurement uses a fresh private redis-server on a free port and a fresh SQLite
file in a temp dir (copied from one migrated template), or with ``--db postgres`` a
fresh database ``PREFIX_xxxxxxxx`` created from a migrated template database and
dropped afterwards; jobs are created the product
way, by writing a pollers.yaml of ``noop`` jobs (bench/noop.py) and running
``manage.py pollers reload``. Processes run with the product's default timings.

1. Worker CPU per task, raw Celery vs nexopoll. M messages are queued first, then one
   worker (``-P prefork -c 1``) starts; CPU of its process tree (psutil, main +
   children, user+sys) is read once the first M/3 messages were consumed (warm-up) and
   again when the queue and the ``unacked`` hash are empty. Raw: the no-op task
   ``bench.noop`` (bench/rawtask.py, loaded with ``-I``). nexopoll: ``nexopoll.tick``
   for M/3 noop jobs, 3 times each, round-robin, so the measured ticks find the
   per-job definition cache warm, as in steady state; no beat. The DB is checked
   afterwards (ticks_total, last_status == "ok"). Then the same ticks again as
   ``nexopoll.tick_batch`` messages of BATCH jobs each (what beat sends when many jobs
   fall due together): CPU per tick, against the same raw Celery figure.
2. Beat CPU per dispatch, stock ``redbeat.RedBeatScheduler`` vs nexopoll's
   ``NexopollScheduler``: N entries every I s, phase-spread over the interval (stock:
   ``last_run_at`` spread over the last interval; nexopoll: its stagger with
   jitter = I). No worker runs: dispatches are counted as the growth of the queue list
   over the window (a batch message counts its ticks); beat CPU is read with psutil
   over the same window, after warm-up.
   Both beats run at ``-l warning`` and beat_max_loop_interval = 1 s (nexopoll's
   setting; stock RedBeat's 300 s default would oversleep).
3. Scheduling lag, the real stack: nexopoll beat + one worker ``-c 2`` running noop
   ticks that record (job_id, ctx.now). A job's slots are epoch + k*I + offset
   (``EverySchedule`` is epoch-anchored; offset = ``stagger_offset``), so
   lag = ctx.now - (latest slot <= ctx.now). This folds any lag above one interval
   back into [0, I): the queue depth samples and ran/due show a backlog instead.
   ran/due = distinct (job, slot) ticks with slot in the window / slots due in the
   window, measured after one interval of warm-up.
4. I/O-bound ticks (part ``io``, bench/io.py): webhook_poll and rss jobs against a
   loopback server answering after 200 ms on 100 hosts (127.0.0.1-100), default
   per-host caps, on the Procfile's ``-P threads -c 64``: CPU per tick beside raw Celery
   tasks doing the same request (and feedparser) in the same run; then N webhook_poll
   jobs every 60 s (10,000 and 20,000; ``--quick``: 1,000 every 10 s) with beat: due/s,
   achieved/s, share of slots started within 1 s, lag and gap p99, worker CPU per tick.
5. Part ``big`` (not in the default parts): 100,000 noop jobs every 600 s, the lag row
   after 30 s of warm-up, with the reload time and the RSS of beat and workers.

Results: a JSON file under bench/results/ and, with matplotlib (``pip install
.[bench]``), a PNG lag histogram per lag row; the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from celery.schedules import schedule as every_schedule
from redbeat.schedulers import RedBeatSchedulerEntry

from nexopoll.core.schedule import EverySchedule, stagger_offset

from . import io
from .io import part_io, part_polite
from .noop import TICKS_KEY
from .plot import histogram, load, machine
from .report import report
from .stack import (
    DB,
    NEXO_SCHEDULER,
    STOCK_SCHEDULER,
    Stack,
    beat_args,
    job_id,
    migrated_template,
    pg_drop,
    use_postgres,
    wait_for,
    worker_args,
)

RESULTS = Path(__file__).resolve().parent / "results"
SYNCED = "nexopoll:redbeat:nexopoll:synced"  # beat writes it once it mirrored the DB
ROUNDS = 3  # worker part: ticks per job
BATCH = 50  # worker part, batched row: jobs per nexopoll.tick_batch (NEXOPOLL_BATCH_SIZE)
PARTS = "worker,beat,lag,io,polite"
PG_DEFAULT = "postgres://postgres@127.0.0.1:5432/nexopoll_bench"


# --- shared -----------------------------------------------------------------------
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


# --- 1. worker CPU per task -----------------------------------------------------------
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


# --- 2. beat CPU per dispatch ---------------------------------------------------------
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


# --- 3. scheduling lag ------------------------------------------------------------------
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
        secs = t1 - t0
        res.update(
            n=n,
            every=every,
            secs=secs,
            ticks_per_s=res["ticks"] / secs,
            due_per_s=n / every,
            queue_max=max(depth),
            queue_end=depth[-1],
            worker_cpu_pct=100 * (wcpu1 - wcpu0) / secs,
            beat_cpu_pct=100 * (bcpu1 - bcpu0) / secs,
            jobs_not_ok=not_ok,
            rss_mb=rss,
            pool=f"{pool} -c {c}",
            workers_alive=worker.alive() and beat.alive(),
        )
        return res
    finally:
        stack.close()


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs", default="1000,10000", help="job counts for lag (max: beat part)")
    p.add_argument("--intervals", default="60,10", help="intervals, s (first: beat part)")
    p.add_argument("--duration", type=float, default=60.0, help="measurement window, s")
    p.add_argument("--messages", type=int, default=3000, help="M for the worker part")
    p.add_argument("--parts", default=PARTS)
    p.add_argument("--concurrency", type=int, default=1, help="worker part: prefork -c")
    p.add_argument("--db", default="sqlite", help="sqlite, or postgres[://URL/prefix]")
    p.add_argument("--io-jobs", default="10000,20000", help="io part: webhook_poll job counts")
    p.add_argument("--io-hosts", type=int, default=100, help="io part: hosts (127.0.0.x)")
    p.add_argument("--io-every", type=float, default=60.0, help="io part: interval, s")
    p.add_argument("--threads", type=int, default=64, help="io part: -P threads -c")
    p.add_argument(
        "--io-processes", type=int, default=0, help="io lag rows: worker processes (0: per core)"
    )
    p.add_argument("--big-jobs", type=int, default=100_000, help="big part: noop jobs / 600 s")
    p.add_argument("--delay-ms", type=int, default=200, help="io part: server answer delay")
    p.add_argument(
        "--quick", action="store_true", help="no beat part, jobs 1000 every 10 s, 15 s windows"
    )
    args = p.parse_args()
    if args.quick:  # about 2 minutes: no beat part, 15 s windows, warm-ups of at most 10 s
        args.jobs, args.intervals, args.duration, args.messages = "1000", "10", 15.0, 1000
        args.io_jobs, args.io_every = "1000", 10.0
        if args.parts == PARTS:
            args.parts = "worker,lag,io,polite"
        io.WARM_CAP = 10.0
    io.PROCESSES = args.io_processes or None
    if args.db.startswith("postgres"):
        use_postgres(args.db if "://" in args.db else PG_DEFAULT)
    return args


def main() -> None:
    args = parse()
    jobs = [int(x) for x in args.jobs.split(",")]
    intervals = [float(x) for x in args.intervals.split(",")]
    parts = args.parts.split(",")
    res: dict[str, Any] = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "args": vars(args),
        "db": "postgresql" if DB["pg"] else "sqlite",
        "machine": machine(),
        "load_before": load(),
        "lag": [],
    }
    dbs = JobDBs(migrated_template())
    try:
        run_parts(res, dbs, args, parts, jobs, intervals)
    finally:
        dbs.close()
    res["load_after"] = load()
    res["reload_secs"] = dbs.reload_secs
    text = report(res)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    stem = f"bench-{res['db']}-{res['started'].replace(':', '')}"
    for name, lags in res.pop("lags", {}).items():
        png = histogram(RESULTS / f"{stem}-{name}.png", lags, f"{name} ({res['db']})")
        if png:
            print(f"PNG: {png}")
    out = RESULTS / f"{stem}.json"
    out.write_text(json.dumps(res, indent=2, default=str))
    print(f"\nJSON: {out}")


def run_parts(res, dbs, args, parts, jobs, intervals) -> None:
    res["lags"] = {}
    if "worker" in parts:
        res["worker"] = part_worker(dbs.template, dbs, args.messages, args.concurrency)
    if "beat" in parts:
        res["beat"] = part_beat(dbs.template, dbs, max(jobs), intervals[0], args.duration)
    if "lag" in parts:
        for n in jobs:
            for every in intervals:
                row = part_lag(dbs, n, every, args.duration)
                res["lags"][f"noop-{n}-every-{every:g}s"] = row.pop("lags_ms")
                res["lag"].append(row)
    if "big" in parts:  # 100,000 jobs every 600 s: phase-spread, so any window is typical
        row = part_lag(dbs, args.big_jobs, 600.0, args.duration, warm=30.0)
        res["lags"][f"noop-{args.big_jobs}-every-600s"] = row.pop("lags_ms")
        res["lag"].append(row)
    if "io" in parts:
        ns = [int(x) for x in str(args.io_jobs).split(",")]
        res["io"] = part_io(
            dbs,
            ns,
            args.io_every,
            args.duration,
            args.messages,
            args.threads,
            args.delay_ms,
            args.io_hosts,
        )
        for row in res["io"]["rows"]:
            res["lags"][f"webhook-{row['n']}-every-{args.io_every:g}s"] = row.pop("lags_ms")
    if "polite" in parts:
        res["polite"] = part_polite(dbs, args.duration, args.threads, args.delay_ms)
        res["lags"]["polite-1000-one-host"] = res["polite"].pop("lags_ms")


if __name__ == "__main__":
    main()
