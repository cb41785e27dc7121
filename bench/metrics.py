"""What the cluster-wide metrics cost a tick: worker CPU per ``nexopoll.tick`` with
``NEXOPOLL_METRICS`` on and off, in the same run, alternating (off, on, off, on, …).

Run from the repo root: ``PYTHONPATH=. .venv/bin/python -m bench.metrics [--messages M]``.
Each measurement is bench.run's worker part: a fresh private Redis and SQLite copy of
M/3 noop jobs, M ``nexopoll.tick`` messages queued, one ``-P prefork -c 1`` worker, its
process tree's CPU read from the moment the first M/3 were consumed until the queue
drained. Then the round trip itself: ``history.record`` (lease release + history
entry) with and without the metric increments, client and redis-server CPU per call.
Also read per mode: Redis commands per tick (``INFO stats``; a pipeline is one
round trip, whatever its commands) and, with metrics on, one ``/metrics`` render's
wall time for those jobs (``nexopoll.metrics.render`` in a ``manage.py shell``).
Results go to bench/results/metrics-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import UTC, datetime
from typing import Any

from .common import RESULTS, ROUNDS, JobDBs, drain, publish
from .stack import Stack, job_id, migrated_template

RENDER = (
    "import time; from nexopoll.metrics import render; t = time.monotonic(); b = render(); "
    "print('render', round((time.monotonic() - t) * 1000, 1), len(b))"
)


def one(dbs: JobDBs, m: int, metrics: bool) -> dict[str, Any]:
    jobs = m // ROUNDS
    stack = Stack(dbs.get(jobs, 3600), NEXOPOLL_METRICS="true" if metrics else "false")
    try:
        calls = [([job_id(i % jobs)], {"lease_ttl_ms": 30000}) for i in range(jobs * ROUNDS)]
        publish(stack, "nexopoll.tick", calls)
        before = int(stack.r.info("stats")["total_commands_processed"])
        res = drain(stack, len(calls), warm=jobs)
        after = int(stack.r.info("stats")["total_commands_processed"])
        res["redis_cmds_per_tick"] = (after - before) / len(calls)
        counted = sum(int(v) for v in stack.r.hvals("nexopoll:metrics:ticks"))
        res["ticks_counted_in_redis"] = counted
        assert counted == (len(calls) if metrics else 0), counted
        if metrics:
            ms, size = stack.manage("shell", "-c", RENDER).strip().splitlines()[-1].split()[-2:]
            res.update(render_ms=float(ms), render_bytes=int(size), jobs=jobs)
    finally:
        stack.close()
    return res


def micro(blocks: int = 10, per_block: int = 1000) -> dict[str, Any]:
    """The tick's post-commit round trip alone (``history.record``), with and without the
    metric increments on its pipeline, against a private Redis: client CPU, wall time and
    redis-server CPU per call, in alternating blocks."""
    from datetime import UTC, datetime

    from nexopoll.runtime import history, metricstore

    from .stack import RedisServer, free_port

    server = RedisServer(free_port())
    server.start()
    client = server.client()
    now = datetime.now(UTC)
    totals = {m: {"cpu": 0.0, "wall": 0.0, "server": 0.0, "n": 0} for m in ("off", "on")}

    def server_cpu() -> float:
        info = client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    try:
        for b in range(blocks * 2):
            mode = ("off", "on")[b % 2]
            t = totals[mode]
            c0, w0, s0 = time.process_time(), time.perf_counter(), server_cpu()
            for i in range(per_block):
                job = f"b{i % 100:06d}"

                def metrics(pipe: Any, job: str = job) -> None:
                    metricstore.queue_tick(pipe, job, status="ok", ms=12, seen=3, dispatched=1)

                history.record(
                    client,
                    job,
                    at=now,
                    status="ok",
                    ms=12,
                    seen=3,
                    dispatched=1,
                    metrics=metrics if mode == "on" else None,
                )
            t["cpu"] += time.process_time() - c0
            t["wall"] += time.perf_counter() - w0
            t["server"] += server_cpu() - s0
            t["n"] += per_block
    finally:
        server.stop()
    out = {m: {k: 1e6 * v / t["n"] for k, v in t.items() if k != "n"} for m, t in totals.items()}
    return {f"{k}_us_{m}": out[m][k] for m in out for k in out[m]} | {
        "added_client_cpu_us": out["on"]["cpu"] - out["off"]["cpu"],
        "added_wall_us": out["on"]["wall"] - out["off"]["wall"],
        "added_redis_cpu_us": out["on"]["server"] - out["off"]["server"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=3000, help="ticks per measurement")
    p.add_argument("--pairs", type=int, default=2, help="off/on pairs")
    args = p.parse_args()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    dbs = JobDBs(migrated_template())
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    for _ in range(args.pairs):
        for mode in ("off", "on"):
            res = one(dbs, args.messages, metrics=mode == "on")
            runs[mode].append(res)
            print(
                f"{mode:3}  {res['cpu_ms_per_task']:.3f} ms CPU/tick  "
                f"{res['tasks_per_s']:.0f} ticks/s  "
                f"{res['redis_cmds_per_tick']:.1f} Redis cmds/tick",
                flush=True,
            )
    med = {k: statistics.median(r["cpu_ms_per_task"] for r in v) for k, v in runs.items()}
    summary = {
        "cpu_ms_per_tick_off": med["off"],
        "cpu_ms_per_tick_on": med["on"],
        "delta_ms": med["on"] - med["off"],
        "delta_pct": 100 * (med["on"] - med["off"]) / med["off"],
        "redis_cmds_per_tick_off": statistics.median(r["redis_cmds_per_tick"] for r in runs["off"]),
        "redis_cmds_per_tick_on": statistics.median(r["redis_cmds_per_tick"] for r in runs["on"]),
        "render_ms": statistics.median(r["render_ms"] for r in runs["on"]),
        "render_jobs": runs["on"][0]["jobs"],
    }
    summary["record_round_trip"] = micro()
    print(json.dumps(summary, indent=2))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"metrics-{started.replace(':', '')}.json"
    out.write_text(
        json.dumps(
            {"started": started, "messages": args.messages, "runs": runs, "summary": summary},
            indent=2,
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
