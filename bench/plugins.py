"""Plugin overhead: in-process no-op poller vs ephemeral and long-lived no-op plugins.

Run from the repo root: ``PYTHONPATH=. .venv/bin/python -m bench.plugins [--messages N]``.
For each kind, one private stack (redis-server + SQLite copy, bench/stack.py) gets J
jobs of that kind; J*3 ``nexopoll.tick`` messages are queued round-robin, then one
worker (``-P prefork -c 1``, product timings) drains them. Measured from the moment the
first J were consumed (warm caches; the long-lived plugin started) until the queue is
empty: wall time and CPU of the worker's whole process tree, plugin processes included
(live ones directly, reaped ephemeral ones through their parent's children times).
The plugins run ``bench/noop_plugin.py`` (raw wire, no SDK import) with ``{python}``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import psutil
import yaml

from tests.support.procs import wait_for

from .common import publish
from .stack import Stack, job_id, migrated_template, worker_args

ROUNDS = 3
NOOP_PLUGIN = Path(__file__).resolve().parent / "noop_plugin.py"
KINDS = {"in-process noop": "noop", "ephemeral plugin": "noop_eph", "long-lived plugin": "noop_ll"}


def write_plugins(root: Path) -> None:
    for plugin_id, kind, lifecycle in (
        ("eph", "noop_eph", "ephemeral"),
        ("ll", "noop_ll", "long_lived"),
    ):
        d = root / plugin_id
        d.mkdir(parents=True)
        (d / "nexopoll-plugin.toml").write_text(
            f'[plugin]\nid = "{plugin_id}"\n[plugin.entrypoint]\ncommand = "{{python}}"\n'
            f'args = ["{NOOP_PLUGIN}"]\n[plugin.poller]\nkinds = ["{kind}"]\n'
            f'lifecycle = "{lifecycle}"\nmax_concurrent_ticks = 64\ntick_timeout_secs = 60\n'
        )


def tree_cpu_all(pid: int) -> float:
    """CPU of a process tree: live processes plus the children each has reaped."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def measure(template: Path, plugins_dir: Path, kind: str, jobs: int) -> dict[str, float]:
    stack = Stack(template, NEXOPOLL_PLUGINS_DIR=str(plugins_dir))
    try:
        doc = {
            "pollers": {
                "default_jitter_ms": 0,
                "jobs": [
                    {
                        "id": job_id(i),
                        "kind": kind,
                        "agent": "bench",
                        "schedule": {"every_secs": 3600},
                        "config": {},
                    }
                    for i in range(jobs)
                ],
            },
            "agents": {"bench": {}},
        }
        stack.config.write_text(yaml.safe_dump(doc, sort_keys=False))
        stack.manage("pollers", "reload")
        calls = [([job_id(i % jobs)], {"lease_ttl_ms": 30000}) for i in range(jobs * ROUNDS)]
        publish(stack, "nexopoll.tick", calls)
        m = len(calls)
        worker = stack.start("worker", worker_args(1, "plug"), "plug")
        wait_for(lambda: stack.queued() <= m - jobs or not worker.alive(), 120, 0.002, "warm")
        assert worker.proc is not None
        t0, cpu0, left = time.monotonic(), tree_cpu_all(worker.proc.pid), stack.queued()
        wait_for(
            lambda: (stack.queued() == 0 and stack.unacked() == 0) or not worker.alive(),
            600,
            0.01,
            "drained",
        )
        t1, cpu1 = time.monotonic(), tree_cpu_all(worker.proc.pid)
        assert worker.alive(), worker.text()[-2000:]
        ((ok, ticks),) = stack.sql(
            "SELECT SUM(last_status = 'ok'), SUM(ticks_total) FROM poll_state"
        )
        assert ok == jobs and ticks == m, f"{kind}: {ok} ok jobs, {ticks} ticks:\n{worker.text()}"
        return {
            "ticks": left,
            "secs": t1 - t0,
            "cpu_ms_per_tick": 1000 * (cpu1 - cpu0) / left,
            "ticks_per_s": left / (t1 - t0),
        }
    finally:
        stack.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=100, help="jobs per kind (ticks = 3x)")
    args = p.parse_args()
    template = migrated_template()
    plugins_dir = Path(tempfile.mkdtemp(prefix="nexopoll-bench-plugins-"))
    write_plugins(plugins_dir)
    rows = {label: measure(template, plugins_dir, kind, args.jobs) for label, kind in KINDS.items()}
    print(f"{'kind':20} {'ticks':>6} {'CPU ms/tick':>12} {'ticks/s':>9}")
    for label, r in rows.items():
        print(f"{label:20} {r['ticks']:6d} {r['cpu_ms_per_tick']:12.2f} {r['ticks_per_s']:9.1f}")
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
