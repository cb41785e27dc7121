"""Profile webhook_poll ticks in a real worker: ``python -m bench.profile_io [--db postgres]``
(``--noop``: no-op ticks against raw no-op tasks).

One private stack (bench/stack.py) with N webhook_poll jobs against the loopback slow
server (bench/slowserver.py), ROUNDS tick messages per job queued round-robin, then one
``-P solo`` worker run under cProfile (every tick on the main thread, so the profile
sees all of it). The same for raw ``bench.fetch`` tasks first: the two CPU figures per
task, measured in the same run, and the top functions of the nexopoll profile by
cumulative and by own time. The profile file is left under bench/results/.
"""

from __future__ import annotations

import argparse
import pstats
import signal
import subprocess
import sys
import time
from pathlib import Path

from .common import RESULTS, ROUNDS, JobDBs, publish
from .io import UNCAPPED, SlowServer
from .plot import load
from .stack import (
    ROOT,
    Stack,
    job_id,
    migrated_template,
    tree_cpu,
    use_postgres,
    wait_for,
    worker_args,
)

PG_DEFAULT = "postgres://postgres@127.0.0.1:5432/nexopoll_prof"


OPTS = {"pool": "solo", "threads": 64, "profile": True}


def solo(stack: Stack, m: int, out: Path, include: str = "") -> dict:
    pool, c = OPTS["pool"], OPTS["threads"] if OPTS["pool"] == "threads" else 1
    args = worker_args(c, "prof", include, pool=pool)
    if OPTS["profile"]:
        cmd = [sys.executable, "-m", "bench._cprof", str(out), "-A", "nexopoll", *args]
    else:
        cmd = [sys.executable, "-m", "celery", "-A", "nexopoll", *args]
    log = open(stack.dir / "prof.log", "ab")
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=stack.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    warm = m // ROUNDS
    wait_for(lambda: stack.queued() <= m - warm or proc.poll() is not None, 120, 0.002, "warm")
    t0, cpu0, left = time.monotonic(), tree_cpu(proc.pid), stack.queued()
    wait_for(
        lambda: (stack.queued() == 0 and stack.unacked() == 0) or proc.poll() is not None,
        600,
        0.01,
        "drained",
    )
    t1, cpu1 = time.monotonic(), tree_cpu(proc.pid)
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    return {"tasks": left, "cpu_ms_per_task": 1000 * (cpu1 - cpu0) / left, "secs": t1 - t0}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", default="sqlite")
    p.add_argument("--jobs", type=int, default=300)
    p.add_argument("--delay-ms", type=int, default=5)
    p.add_argument("--top", type=int, default=45)
    p.add_argument("--pool", default="solo", help="solo (profiled) or threads (-c 64)")
    p.add_argument("--no-profile", action="store_true", help="CPU per task only")
    p.add_argument("--noop", action="store_true", help="no-op ticks against raw no-op tasks")
    a = p.parse_args()
    OPTS.update(pool=a.pool, profile=not a.no_profile)
    if a.db.startswith("postgres"):
        use_postgres(a.db if "://" in a.db else PG_DEFAULT)
    RESULTS.mkdir(exist_ok=True)
    dbs = JobDBs(migrated_template())
    server = SlowServer(a.delay_ms)
    m = a.jobs * ROUNDS
    try:
        raw = Stack(dbs.template)
        try:
            if a.noop:
                publish(raw, "bench.noop", [([], {})] * m)
            else:
                publish(
                    raw, "bench.fetch", [([f"{server.url}/raw{i % 100}"], {}) for i in range(m)]
                )
            raw_res = solo(raw, m, RESULTS / "prof-raw.prof", include="bench.rawtask")
        finally:
            raw.close()
        nexo = Stack(
            dbs.get(a.jobs, 3600) if a.noop else dbs.get(a.jobs, 3600, server.url, UNCAPPED)
        )
        try:
            calls = [([job_id(i % a.jobs)], {"lease_ttl_ms": 30000}) for i in range(m)]
            publish(nexo, "nexopoll.tick", calls)
            out = RESULTS / "prof-tick.prof"
            res = solo(nexo, m, out)
        finally:
            nexo.close()
    finally:
        server.close()
        dbs.close()
    how = f"{a.pool}, {'with' if OPTS['profile'] else 'no'} cProfile, load {load()}"
    print(
        f"raw {'no-op' if a.noop else 'fetch'}  {raw_res['cpu_ms_per_task']:.3f} ms CPU/task "
        f"({how})"
    )
    print(
        f"nexopoll   {res['cpu_ms_per_task']:.3f} ms CPU/task  ratio "
        f"{res['cpu_ms_per_task'] / raw_res['cpu_ms_per_task']:.2f}x"
    )
    if not OPTS["profile"]:
        return
    st = pstats.Stats(str(out))
    st.sort_stats("cumulative").print_stats(a.top)
    st.sort_stats("tottime").print_stats(a.top)


if __name__ == "__main__":
    main()
