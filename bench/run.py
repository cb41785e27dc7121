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

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from . import io
from .beatpart import part_beat
from .common import RESULTS, JobDBs
from .io import part_io, part_polite
from .lag import part_lag
from .plot import histogram, load, machine
from .report import report
from .stack import (
    DB,
    migrated_template,
    use_postgres,
)
from .workerpart import part_worker

PARTS = "worker,beat,lag,io,polite"
PG_DEFAULT = "postgres://postgres@127.0.0.1:5432/nexopoll_bench"


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
