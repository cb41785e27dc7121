"""Bench part ``io``: I/O-bound ticks, webhook_poll against a loopback server that
answers every request after ``delay_ms`` (bench/slowserver.py), on the Procfile's
worker pool (``-P threads -c T``).

1. CPU per task, raw vs nexopoll, same pool: M raw Celery tasks ``bench.fetch`` (one
   ``requests`` GET on a shared Session, bench/rawtask.py) are queued and drained by
   one ``-P threads -c T`` worker; then M ``nexopoll.tick`` messages for M/3
   webhook_poll jobs, 3 each, round-robin (the first round warms the definitions
   cache and the connection pool and is left out). The server's answers are ``[]``:
   every measured tick is a cheap unchanged poll (no items, same cursor, no outbox row).
   The server reports the most requests it had in flight at once.
2. Lag: beat + one threads worker, N webhook_poll jobs every I s; lag = the request's
   arrival at the server - the job's slot (the poll is the tick's first I/O, after the
   lease, the state read and the definition); ran/due as for the noop rows.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from typing import Any

from .stack import NEXO_SCHEDULER, ROOT, Stack, beat_args, free_port, job_id, worker_args

SYNCED = "nexopoll:redbeat:nexopoll:synced"
# the io rows' jobs, all on one host, lift the per-host cap to the worker's threads
UNCAPPED = {"in_flight": 64}
WARM_CAP = float("inf")
POLITE = {"in_flight": 8, "per_sec": 40}  # the politeness row: 1,000 jobs on one host


class SlowServer:
    def __init__(self, delay_ms: int) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.slowserver", str(self.port), str(delay_ms)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == b"ready"
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/j"

    def get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.base + path, timeout=30) as r:
            return json.loads(r.read())

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def part_io(dbs, n: int, every: float, duration: float, m: int, threads: int, delay_ms: int):
    from .run import ROUNDS, drain, lag_stats, offsets, publish

    server = SlowServer(delay_ms)
    try:
        res: dict[str, Any] = {"n": n, "every": every, "threads": threads, "delay_ms": delay_ms}
        raw = Stack(dbs.template)
        try:
            publish(raw, "bench.fetch", [([f"{server.url}/raw{i % 1000}"], {}) for i in range(m)])
            server.get("/__reset")
            res["raw"] = drain(raw, m, include="bench.rawtask", warm=m // ROUNDS,
                               concurrency=threads, pool="threads")  # fmt: skip
            res["raw"]["max_in_flight"] = server.get("/__stats")["max_in_flight"]
        finally:
            raw.close()
        jobs = m // ROUNDS
        nexo = Stack(dbs.get(jobs, 3600, server.url, UNCAPPED))
        try:
            calls = [([job_id(i % jobs)], {"lease_ttl_ms": 30000}) for i in range(jobs * ROUNDS)]
            publish(nexo, "nexopoll.tick", calls)
            server.get("/__reset")
            res["nexopoll"] = drain(nexo, len(calls), warm=jobs, concurrency=threads,
                                    pool="threads")  # fmt: skip
            res["nexopoll"]["max_in_flight"] = server.get("/__stats")["max_in_flight"]
            ((ticks, outbox),) = nexo.sql(
                "SELECT (SELECT SUM(ticks_total) FROM poll_state), "
                "(SELECT COUNT(*) FROM poll_outbox)"
            )
            res["nexopoll"].update(ticks_total=ticks, outbox_rows=outbox)
        finally:
            nexo.close()
        res["ratio"] = res["nexopoll"]["cpu_ms_per_task"] / res["raw"]["cpu_ms_per_task"]
        res["lag"] = io_lag(dbs, server, n, every, duration, threads, lag_stats, offsets)
        return res
    finally:
        server.close()


def io_lag(
    dbs, server: SlowServer, n, every, duration, threads, lag_stats, offsets, limits=None
) -> dict:
    stack = Stack(dbs.get(n, every, server.url, limits or UNCAPPED))
    try:
        worker = stack.start("worker", worker_args(threads, "io", pool="threads"), "io")
        beat = stack.start("beat", beat_args(NEXO_SCHEDULER, stack.dir), "beat")
        ok = lambda: stack.redis.client().exists(SYNCED) or not beat.alive()  # noqa: E731
        from .stack import wait_for

        wait_for(ok, 180, 0.05, "beat")
        time.sleep(min(every, WARM_CAP))  # warm-up: one interval (--quick: at most 10 s)
        server.get("/__reset")
        t0, wcpu0, bcpu0 = time.time(), worker.cpu(), beat.cpu()
        depth = []
        while time.time() < t0 + duration:
            depth.append(stack.queued())
            time.sleep(1)
        t1, wcpu1, bcpu1 = time.time(), worker.cpu(), beat.cpu()
        rss = {"worker": worker.rss(), "beat": beat.rss()}
        time.sleep(2)
        stats = server.get("/__stats")
        records = [(jid, ts) for jid, ts in stats["records"] if jid.startswith("b")]
        per_second = Counter(int(ts) for _, ts in records if t0 <= ts < t1)
        res = lag_stats(records, offsets(stack, every), every, t0, t1)
        secs = t1 - t0
        res.update(n=n, every=every, secs=secs, ticks_per_s=res["ticks"] / secs,
                   due_per_s=n / every, queue_max=max(depth), queue_end=depth[-1],
                   worker_cpu_pct=100 * (wcpu1 - wcpu0) / secs,
                   worker_cpu_ms_per_tick=1000 * (wcpu1 - wcpu0) / max(res["ticks"], 1),
                   beat_cpu_pct=100 * (bcpu1 - bcpu0) / secs,
                   max_in_flight=stats["max_in_flight"], rss_mb=rss,
                   max_per_second=max(per_second.values(), default=0),
                   workers_alive=worker.alive() and beat.alive())  # fmt: skip
        return res
    finally:
        stack.close()


def part_polite(dbs, duration: float, threads: int, delay_ms: int) -> dict[str, Any]:
    """1,000 webhook_poll jobs every 30 s (33/s on average, more in the bursts of the
    phase spread) on one host capped at 8 in flight (40/s at 200 ms) and 40/s: the caps
    hold, ticks that find the host busy wait for their turn (lag, not errors)."""
    from .run import lag_stats, offsets

    server = SlowServer(delay_ms)
    try:
        res = io_lag(dbs, server, 1000, 30.0, duration, threads, lag_stats, offsets, POLITE)
        res["limits"] = POLITE
        return res
    finally:
        server.close()


def report_polite(r: dict[str, Any]) -> list[str]:
    lim = r["limits"]
    return [
        f"5. Per-host politeness: N={r['n']} webhook_poll jobs on one host every "
        f"{r['every']:g}s ({r['due_per_s']:.0f}/s due), host_limits in_flight={lim['in_flight']}"
        f" per_sec={lim['per_sec']}",
        f"   server saw at most {r['max_in_flight']} in flight (cap {lim['in_flight']}) and "
        f"{r['max_per_second']} requests in one second (cap {lim['per_sec']}); "
        f"{r['ticks_per_s']:.0f} ticks/s, ran/due {r['ran_per_due']:.1%}, "
        f"lag p50 {r['lag_p50_ms']:.0f} ms p99 {r['lag_p99_ms']:.0f} ms, q max {r['queue_max']}",
        "",
    ]


def report_io(r: dict[str, Any]) -> list[str]:
    raw, nx, lag = r["raw"], r["nexopoll"], r["lag"]
    return [
        f"4. I/O-bound ticks: webhook_poll vs a loopback server answering after "
        f"{r['delay_ms']} ms, worker -P threads -c {r['threads']}",
        f"   {'':10}{'ms CPU/task':>12}{'tasks/s':>10}{'tasks':>8}{'in flight':>10}",
        f"   {'raw fetch':10}{raw['cpu_ms_per_task']:12.3f}{raw['tasks_per_s']:10.0f}"
        f"{raw['tasks']:8d}{raw['max_in_flight']:10d}",
        f"   {'nexopoll':10}{nx['cpu_ms_per_task']:12.3f}{nx['tasks_per_s']:10.0f}"
        f"{nx['tasks']:8d}{nx['max_in_flight']:10d}",
        f"   ratio nexopoll/raw = {r['ratio']:.2f}x; every measured tick an unchanged poll: "
        f"outbox rows={nx['outbox_rows']}, ticks_total={nx['ticks_total']}",
        f"   lag, N={lag['n']} every {lag['every']:g}s ({lag['due_per_s']:.0f}/s): ran/due "
        f"{lag['ran_per_due']:.1%}, p50 {lag['lag_p50_ms']:.0f} ms, p99 {lag['lag_p99_ms']:.0f}"
        f" ms, max {lag['lag_max_ms']:.0f} ms, q max {lag['queue_max']}, in flight max "
        f"{lag['max_in_flight']}, worker CPU {lag['worker_cpu_pct']:.0f}% "
        f"({lag['worker_cpu_ms_per_tick']:.2f} ms/tick), beat {lag['beat_cpu_pct']:.0f}%",
        f"   max requests in one second {lag['max_per_second']}; "
        f"RSS MB: worker {fmt_rss(lag['rss_mb']['worker'])}, beat "
        f"{fmt_rss(lag['rss_mb']['beat'])}",
        "",
    ]


def fmt_rss(values: list[float]) -> str:
    return "+".join(f"{v:.0f}" for v in values) or "?"
