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
2. Lag: beat + the Procfile's worker as shipped (``python -m nexopoll.workers``: one
   ``-P threads -c T`` process per core), N webhook_poll jobs every I s; lag = the request's
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

from .common import BATCH, ROUNDS, drain, publish
from .lag import lag_stats, offsets, window_figures
from .plot import load
from .stack import (
    LAUNCHER_ARGS,
    NEXO_SCHEDULER,
    ROOT,
    Stack,
    beat_args,
    free_port,
    job_id,
    wait_for,
    worker_args,
)

SYNCED = "nexopoll:redbeat:nexopoll:synced"
# the io rows' jobs, all on one host, lift the per-host cap to the worker's threads
UNCAPPED = {"in_flight": 64}
WARM_CAP = float("inf")
POLITE = {"in_flight": 8, "per_sec": 40}  # the politeness row: 1,000 jobs on one host
# the lag rows' worker: the Procfile's launcher (None: one process per core, as shipped)
PROCESSES: int | None = None


class SlowServer:
    def __init__(self, delay_ms: int, hosts: int = 1) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.slowserver", str(self.port), str(delay_ms), str(hosts)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == b"ready"
        self.hosts = hosts
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/j"
        self.feed_url = f"{self.base}/f"

    def url_for(self, kind: str) -> str:
        """Where ``kind``'s jobs poll: the feed path for rss, the JSON list otherwise."""
        return self.feed_url if kind == "rss" else self.url

    def spread(self, url: str, i: int) -> str:
        """``url`` on the i-th of the server's hosts (as ``Stack.load_jobs`` spreads jobs)."""
        return url.replace("127.0.0.1", f"127.0.0.{i % self.hosts + 1}", 1)

    def get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.base + path, timeout=30) as r:
            return json.loads(r.read())

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def cpu_pair(dbs, server: SlowServer, m: int, threads: int, kind: str) -> dict[str, Any]:
    """CPU per task of M raw Celery tasks doing a tick's request (``bench.fetch``; for rss
    ``bench.fetch_feed``, with feedparser) and of M ticks of M/3 ``kind`` jobs, 3 each,
    round-robin (the first round warms caches and is left out), on one ``-P threads``
    worker, over the server's hosts with the default per-host caps."""

    url = server.url_for(kind)
    raw_task = "bench.fetch_feed" if kind == "rss" else "bench.fetch"
    out: dict[str, Any] = {}
    raw = Stack(dbs.template)
    try:
        publish(raw, raw_task, [([server.spread(f"{url}/raw{i % 1000}", i)], {}) for i in range(m)])
        server.get("/__reset")
        out["raw"] = drain(
            raw, m, include="bench.rawtask", warm=m // ROUNDS, concurrency=threads, pool="threads"
        )
        out["raw"]["max_in_flight"] = server.get("/__stats")["max_in_flight"]
    finally:
        raw.close()
    jobs = m // ROUNDS
    nexo = Stack(dbs.get(jobs, 3600, url, None, server.hosts, kind))
    try:
        calls = [([job_id(i % jobs)], {"lease_ttl_ms": 30000}) for i in range(jobs * ROUNDS)]
        publish(nexo, "nexopoll.tick", calls)
        server.get("/__reset")
        out["nexopoll"] = drain(nexo, len(calls), warm=jobs, concurrency=threads, pool="threads")
        out["nexopoll"]["max_in_flight"] = server.get("/__stats")["max_in_flight"]
        ((ticks, outbox, ok),) = nexo.sql(
            "SELECT (SELECT SUM(ticks_total) FROM poll_state), "
            "(SELECT COUNT(*) FROM poll_outbox), "
            "(SELECT COUNT(*) FROM poll_state WHERE last_status = 'ok')"
        )
        out["nexopoll"].update(ticks_total=ticks, outbox_rows=outbox, status_ok=ok, jobs=jobs)
    finally:
        nexo.close()
    out["ratio"] = out["nexopoll"]["cpu_ms_per_task"] / out["raw"]["cpu_ms_per_task"]
    out["batched"] = cpu_batched(dbs, server, m, threads, kind)
    out["batched_ratio"] = out["batched"]["cpu_ms_per_tick"] / out["raw"]["cpu_ms_per_task"]
    return out


def cpu_batched(dbs, server: SlowServer, m: int, threads: int, kind: str) -> dict[str, Any]:
    """M ticks of M/3 ``kind`` jobs as ``nexopoll.tick_batch`` messages of BATCH jobs, what
    beat sends for jobs that wait on the network once many fall due together: the worker
    polls each batch's jobs side by side on its poll threads. Round by round, on one
    ``-P threads`` worker: the first round (which fills caches and finds the jobs slow)
    is left out, and each later round is queued once the one before has drained, so no
    batch finds a job's lease still held by its previous tick. CPU per tick, not per
    message."""

    url = server.url_for(kind)
    jobs = m // ROUNDS
    nexo = Stack(dbs.get(jobs, 3600, url, None, server.hosts, kind))
    ids = [job_id(i) for i in range(jobs)]
    calls = [([[[j, 30000] for j in ids[k : k + BATCH]]], {}) for k in range(0, jobs, BATCH)]

    def one_round() -> None:
        publish(nexo, "nexopoll.tick_batch", calls)
        drained = lambda: nexo.queued() == 0 and nexo.unacked() == 0  # noqa: E731
        assert wait_for(lambda: drained() or not worker.alive(), 600, 0.01, "round drained")
        assert worker.alive(), f"worker died:\n{worker.text()[-2000:]}"

    try:
        worker = nexo.start("worker", worker_args(threads, "batched", pool="threads"), "batched")
        one_round()
        server.get("/__reset")
        t0, cpu0 = time.monotonic(), worker.cpu()
        for _ in range(ROUNDS - 1):
            one_round()
        secs, cpu = time.monotonic() - t0, worker.cpu() - cpu0
        ticks = jobs * (ROUNDS - 1)
        ((total, ok),) = nexo.sql(
            "SELECT SUM(ticks_total), SUM(CASE WHEN last_status = 'ok' THEN 1 ELSE 0 END) "
            "FROM poll_state"
        )
        return {
            "batch": BATCH,
            "jobs": jobs,
            "ticks": ticks,
            "secs": secs,
            "cpu_s": cpu,
            "cpu_ms_per_tick": 1000 * cpu / ticks,
            "ticks_per_s": ticks / secs,
            "max_in_flight": server.get("/__stats")["max_in_flight"],
            "ticks_total": total,
            "status_ok": ok,
        }
    finally:
        nexo.close()


def part_io(
    dbs,
    ns: list[int],
    every: float,
    duration: float,
    m: int,
    threads: int,
    delay_ms: int,
    hosts: int = 100,
) -> dict[str, Any]:

    server = SlowServer(delay_ms, hosts)
    try:
        res: dict[str, Any] = {
            "ns": ns,
            "every": every,
            "threads": threads,
            "delay_ms": delay_ms,
            "hosts": hosts,
        }
        res["webhook"] = cpu_pair(dbs, server, m, threads, "webhook_poll")
        res["rss"] = cpu_pair(dbs, server, m, threads, "rss")
        res["rows"] = [
            io_lag(dbs, server, n, every, duration, threads, lag_stats, offsets, limits=None)
            for n in ns
        ]
        return res
    finally:
        server.close()


def io_lag(
    dbs, server: SlowServer, n, every, duration, threads, lag_stats, offsets, limits=UNCAPPED
) -> dict:
    stack = Stack(dbs.get(n, every, server.url, limits, server.hosts))
    try:
        sizes = {"NEXOPOLL_WORKER_THREADS": str(threads)}
        if PROCESSES:
            sizes["NEXOPOLL_WORKER_PROCESSES"] = str(PROCESSES)
        worker = stack.start("worker", LAUNCHER_ARGS, "io", module="nexopoll.workers", **sizes)
        beat = stack.start("beat", beat_args(NEXO_SCHEDULER, stack.dir), "beat")
        ok = lambda: stack.redis.client().exists(SYNCED) or not beat.alive()  # noqa: E731
        wait_for(ok, 180, 0.05, "beat")
        time.sleep(min(every, WARM_CAP))  # warm-up: one interval (--quick: at most 10 s)
        server.get("/__reset")
        t0, wcpu0, bcpu0, svc0 = time.time(), worker.cpu(), beat.cpu(), stack.service_cpu()
        depth = []
        while time.time() < t0 + duration:
            depth.append(stack.queued())
            time.sleep(1)
        t1, wcpu1, bcpu1, svc1 = time.time(), worker.cpu(), beat.cpu(), stack.service_cpu()
        rss = {"worker": worker.rss(), "beat": beat.rss()}
        time.sleep(2)
        stats = server.get("/__stats")
        records = [(jid, ts) for jid, ts in stats["records"] if jid.startswith("b")]
        per_second = Counter(int(ts) for _, ts in records if t0 <= ts < t1)
        offs = offsets(stack, every)
        res = lag_stats(records, offs, every, t0, t1)
        res.update(slot_stats(records, offs, every, t0, t1, res["due"]))
        secs = t1 - t0
        res.update(window_figures(res, n, every, secs, depth, wcpu1 - wcpu0, bcpu1 - bcpu0))
        res.update(
            worker_cpu_ms_per_tick=1000 * (wcpu1 - wcpu0) / max(res["ticks"], 1),
            # the whole stack's CPU per tick: worker, beat, Redis and the DB server
            stack_cpu_ms_per_tick=1000
            * (wcpu1 - wcpu0 + bcpu1 - bcpu0 + sum(svc1.values()) - sum(svc0.values()))
            / max(res["ticks"], 1),
            redis_cpu_pct=100 * (svc1["redis"] - svc0["redis"]) / secs,
            db_cpu_pct=100 * (svc1["db"] - svc0["db"]) / secs,
            max_in_flight=stats["max_in_flight"],
            rss_mb=rss,
            worker_processes=len(rss["worker"]) - 1,  # the launcher's children
            max_per_second=max(per_second.values(), default=0),
            load=load(),
            workers_alive=worker.alive() and beat.alive(),
        )
        return res
    finally:
        stack.close()


def slot_stats(records, offs, every: float, t0: float, t1: float, due: int) -> dict[str, float]:
    """The share of the window's slots whose request arrived within 1 s of the slot, and
    the p99 of the gaps between a job's consecutive requests beyond its interval (a tick
    that came late or was missed shows as a gap; 0 when on time)."""
    import math

    on_time = set()
    per_job: dict[str, list[float]] = {}
    for jid, ts in records:
        o = offs[jid]
        slot = math.floor((ts - o) / every) * every + o
        if t0 <= slot < t1 and ts - slot < 1.0:
            on_time.add((jid, round(slot, 3)))
        if t0 - every <= ts < t1:
            per_job.setdefault(jid, []).append(ts)
    gaps = sorted(
        max(0.0, b - a - every)
        for tss in per_job.values()
        for a, b in zip(sorted(tss), sorted(tss)[1:], strict=False)
    )
    p99 = gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))] if gaps else math.nan
    return {"within_1s": len(on_time) / due if due else math.nan, "gap_p99_s": p99}


def part_polite(dbs, duration: float, threads: int, delay_ms: int) -> dict[str, Any]:
    """1,000 webhook_poll jobs every 30 s (33/s on average, more in the bursts of the
    phase spread) on one host capped at 8 in flight (40/s at 200 ms) and 40/s: the caps
    hold, ticks that find the host busy wait for their turn (lag, not errors)."""

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
    out = [
        f"4. I/O-bound ticks: loopback server answering after {r['delay_ms']} ms on "
        f"{r['hosts']} hosts (127.0.0.x), default per-host caps, worker -P threads "
        f"-c {r['threads']}",
        f"   {'':16}{'ms CPU/task':>12}{'tasks/s':>10}{'tasks':>8}{'in flight':>10}",
    ]
    for kind, raw_name in (("webhook", "raw fetch"), ("rss", "raw fetch+feedp")):
        pair = r[kind]
        raw, nx = pair["raw"], pair["nexopoll"]
        out += [
            f"   {raw_name:16}{raw['cpu_ms_per_task']:12.3f}{raw['tasks_per_s']:10.0f}"
            f"{raw['tasks']:8d}{raw['max_in_flight']:10d}",
            f"   {kind + ' tick':16}{nx['cpu_ms_per_task']:12.3f}{nx['tasks_per_s']:10.0f}"
            f"{nx['tasks']:8d}{nx['max_in_flight']:10d}",
            f"   ratio {kind}/raw = {pair['ratio']:.2f}x (target <= 1.5x); DB: ticks_total="
            f"{nx['ticks_total']}, last_status ok={nx['status_ok']}/{nx['jobs']}, outbox rows="
            f"{nx['outbox_rows']}",
        ]
        if "batched" in pair:
            b = pair["batched"]
            out += [
                f"   {kind + ' batched':16}{b['cpu_ms_per_tick']:12.3f}"
                f"{b['ticks_per_s']:10.0f}{b['ticks']:8d}{b['max_in_flight']:10d}",
                f"   ratio {kind} batched/raw = {pair['batched_ratio']:.2f}x (per tick, "
                f"{b['batch']} jobs a message); DB: ticks_total={b['ticks_total']}, last_status "
                f"ok={b['status_ok']}/{b['jobs']}",
            ]
    out += [
        f"   webhook_poll jobs every {r['every']:g}s, worker: python -m nexopoll.workers "
        f"({r['rows'][0]['worker_processes'] if r['rows'] else '?'} x -P threads "
        f"-c {r['threads']}); rows measured after one interval",
        f"   {'N':>7} {'due/s':>6} {'achieved/s':>10} {'<=1s':>7} {'lag p99':>8} {'gap p99':>8}"
        f" {'q max':>6} {'wrk CPU%':>8} {'ms/tick':>8} {'beat%':>6} {'redis%':>6} {'db%':>5}"
        f" {'stack ms/tick':>13}  load",
    ]
    for x in r["rows"]:
        out.append(
            f"   {x['n']:7d} {x['due_per_s']:6.0f} {x['ticks_per_s']:10.0f} "
            f"{x['within_1s']:7.1%} {x['lag_p99_ms'] / 1000:7.2f}s {x['gap_p99_s']:7.2f}s"
            f" {x['queue_max']:6d} {x['worker_cpu_pct']:8.0f} {x['worker_cpu_ms_per_tick']:8.2f}"
            f" {x['beat_cpu_pct']:6.0f} {x['redis_cpu_pct']:6.0f} {x['db_cpu_pct']:5.0f}"
            f" {x['stack_cpu_ms_per_tick']:13.2f}  {x['load']}"
        )
    out += [
        f"   RSS MB N={x['n']}: worker {fmt_rss(x['rss_mb']['worker'])}, beat "
        f"{fmt_rss(x['rss_mb']['beat'])}"
        for x in r["rows"]
    ]
    out.append("")
    return out


def fmt_rss(values: list[float]) -> str:
    return "+".join(f"{v:.0f}" for v in values) or "?"
