"""The text report of a bench run (``bench.run`` prints it; the JSON has every figure)."""

from __future__ import annotations

from typing import Any

from .io import fmt_rss, report_io, report_polite


def report(res: dict[str, Any]) -> str:
    out = [
        f"nexopoll bench {res['started']} on {res['db']}, load average before "
        f"{res['load_before']}, after {res.get('load_after')}  ({res['args']})",
        "",
    ]
    w = res.get("worker")
    if w:
        raw, nx = w["raw"], w["nexopoll"]
        out += [
            f"1. Worker CPU per task, prefork -c 1, M={w['m']} queued messages",
            f"   {'':10}{'ms CPU/task':>12}{'tasks/s':>10}{'tasks':>8}",
            f"   {'raw celery':10}{raw['cpu_ms_per_task']:12.3f}{raw['tasks_per_s']:10.0f}"
            f"{raw['tasks']:8d}",
            f"   {'nexopoll':10}{nx['cpu_ms_per_task']:12.3f}{nx['tasks_per_s']:10.0f}"
            f"{nx['tasks']:8d}",
            f"   ratio nexopoll/raw = {w['ratio']:.2f}x (target <= 1.5x); DB: ticks_total="
            f"{nx['ticks_total']} over {nx['jobs']} jobs, last_status ok={nx['status_ok']} "
            f"other={nx['status_other']}",
        ]
        bt = w.get("batched")
        if bt:
            out += [
                f"   {'batched':10}{bt['cpu_ms_per_tick']:12.3f}"
                f"{bt['tasks_per_s'] * bt['batch']:10.0f}{bt['ticks']:8d}"
                f"  (per tick; nexopoll.tick_batch of {bt['batch']} jobs)",
                f"   ratio batched/raw = {w['batched_ratio']:.2f}x; DB: ticks_total="
                f"{bt['ticks_total']}",
            ]
        out.append("")
    b = res.get("beat")
    if b:
        out += [
            f"2. Beat CPU per dispatch, N={b['n']} every {b['every']:g}s, "
            f"{b['duration']:g}s window, no worker",
            f"   {'':10}{'ms CPU/disp':>12}{'beat CPU%':>10}{'dispatched':>11}"
            f"{'disp/due':>9}{'redis MB':>9}",
        ]
        for name in ("stock", "nexopoll"):
            r = b[name]
            out.append(
                f"   {name:10}{r['cpu_ms_per_dispatch']:12.3f}{r['cpu_pct']:10.1f}"
                f"{r['dispatched']:11d}{r['dispatched_per_due']:9.1%}"
                f"{r['redis_used_mb']:9.1f}"
            )
        out += [f"   ratio nexopoll/stock = {b['ratio']:.2f}x (target <= 0.25x at N=10,000)", ""]
    if res.get("lag"):
        out += [
            "3. Scheduling lag, nexopoll beat + worker -c 2 (lag = tick start - slot)",
            f"   {'N':>6} {'every':>5} {'due/s':>6} {'ticks/s':>7} {'ran/due':>8}"
            f" {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'q max':>6} {'q end':>6}"
            f" {'wrk CPU%':>8} {'beat%':>6}",
        ]
        for r in res["lag"]:
            out.append(
                f"   {r['n']:6d} {r['every']:5g} {r['due_per_s']:6.0f} "
                f"{r['ticks_per_s']:7.0f} {r['ran_per_due']:8.1%} {r['lag_p50_ms']:7.0f}"
                f" {r['lag_p99_ms']:7.0f} {r['lag_max_ms']:7.0f} {r['queue_max']:6d}"
                f" {r['queue_end']:6d} {r['worker_cpu_pct']:8.0f} {r['beat_cpu_pct']:6.0f}"
            )
        out.append("   (lag folds into [0, every): read q max / q end and ran/due for backlog)")
        out += [
            f"   RSS MB N={r['n']}: worker {fmt_rss(r['rss_mb']['worker'])}, beat "
            f"{fmt_rss(r['rss_mb']['beat'])}"
            for r in res["lag"]
        ]
        out.append("")
    if res.get("io"):
        out += report_io(res["io"])
    if res.get("polite"):
        out += report_polite(res["polite"])
    out += ratios(res)
    reloads = ", ".join(f"{k} {v:.1f}s" for k, v in res["reload_secs"].items())
    out += ["", f"manage.py pollers reload times: {reloads}"]
    return "\n".join(out)


def ratios(res: dict[str, Any]) -> list[str]:
    """The CPU ratios of issue 19, each against its raw baseline measured in this run."""
    rows = []
    io, w = res.get("io"), res.get("worker")
    if io:
        rows.append(("webhook_poll tick / raw requests.get task", io["webhook"]["ratio"], 1.5))
        rows.append(("rss tick / raw requests.get+feedparser task", io["rss"]["ratio"], 1.5))
        for kind in ("webhook", "rss"):  # what beat sends once many I/O ticks fall due
            if "batched_ratio" in io[kind]:
                name = f"{'webhook_poll' if kind == 'webhook' else kind} batched tick / raw task"
                rows.append((name, io[kind]["batched_ratio"], 1.5))
    if w:
        rows.append(("single-message no-op tick / raw Celery no-op", w["ratio"], 1.5))
        if w.get("batched"):
            rows.append(("batched no-op tick / raw Celery no-op", w["batched_ratio"], 0.4))
    if not rows:
        return []
    out = ["CPU ratios (worker process CPU, same run):"]
    out += [f"   {name:46} {r:5.2f}x  (goal <= {goal}x)" for name, r, goal in rows]
    return [*out, ""]
