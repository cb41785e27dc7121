"""`make chaos`: one run of the whole stack with items flowing, each component killed in turn.

Everything is private to the run (never the machine's servers): a redis-server on a free
port, a RabbitMQ node (tests/support/rabbit.py) as the broker, a PostgreSQL cluster
(tests/support/pgcluster.py), a webhook sink, two workers and two beats. Each job (the
``scripted`` test poller) gets new items before and during every fault; the faults:

- ``worker``: SIGKILL one worker (its process group), start a replacement;
- ``beat``: SIGKILL the beat that holds the lock; the standby takes over; restart it;
- ``redis``: SIGKILL the Redis primary; the sentinels promote the replica. This fault
  runs last, on a stack of its own: a primary, a replica and three sentinels
  (tests/support/sentinel.py) serve as broker and store, and every process finds the
  master through the sentinels only (as test_reliability_sentinel.py, with its 15 s
  beat lock, which outlives the failover); printed as skipped on a build without
  Sentinel support (``NEXOPOLL_REDIS_SENTINELS``);
- ``broker``: SIGKILL RabbitMQ, start it again after a few seconds;
- ``postgresql``: ``pg_ctl -m immediate stop``, start again after a few seconds.

Per fault it prints: the longest gap between completed ticks, and the fault's items
published, delivered, duplicated (a repeat under the same delivery id) and lost (never
delivered, or delivered under two delivery ids). Exits 1 when anything was lost.

    python -m bench.chaos                       # 1,000 jobs, every fault (nightly)
    python -m bench.chaos --jobs 50 --faults worker,broker    # the smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.support.pgcluster import PrivateCluster, pg_tools_available
from tests.support.procs import ROOT, CeleryProc, RedisServer, stack_env, wait_for
from tests.support.rabbit import RabbitNode, rabbitmq_server
from tests.support.sentinel import MASTER, SentinelGroup
from tests.support.sink import Sink

FAULTS = ("worker", "beat", "redis", "broker", "postgresql")
DOWN_SECS = 3.0  # how long the broker / PostgreSQL stay down
DELIVER_TIMEOUT = 180.0  # after the fault: every item of the phase must arrive by then


@dataclass
class Row:
    fault: str
    gap: float = 0.0
    published: int = 0
    delivered: int = 0
    duplicated: int = 0
    lost: int = 0
    note: str = ""


@dataclass
class Tally:
    """Arrivals read from the sink so far: (job, item) -> delivery ids, one per arrival."""

    seen: dict[tuple[str, int], list[str]] = field(default_factory=lambda: defaultdict(list))
    read: int = 0


def setup_django() -> None:
    """Settings for this process (key names); the stack's processes get their own env."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nexopoll.settings")
    django.setup()


def sentinel_supported() -> bool:
    """This build reads NEXOPOLL_REDIS_SENTINELS (settings.NEXOPOLL_REDIS_SENTINEL, the
    parsed ``SentinelConf``, exists: Redis Sentinel support is merged)."""
    from django.conf import settings

    return hasattr(settings, "NEXOPOLL_REDIS_SENTINEL")


class Chaos:
    def __init__(self, jobs: int, every: float, threads: int, sentinel: bool = False) -> None:
        self.n, self.every, self.threads = jobs, every, threads
        self.sentinel = sentinel  # Redis under Sentinel as broker and store, no RabbitMQ
        self.tmp = Path(tempfile.mkdtemp(prefix="nexopoll-chaos-"))
        self.jobs = [f"c{i:04d}" for i in range(jobs)]
        self.next_item = dict.fromkeys(self.jobs, 1)
        self.tally = Tally()
        self.workers: list[CeleryProc] = []
        self.beats: list[CeleryProc] = []
        self._ticks: list[tuple[float, int]] = []
        self._stop = threading.Event()

    # --- the stack -----------------------------------------------------------------
    def start(self) -> None:
        self.rabbit: RabbitNode | None = None
        if self.sentinel:
            self.redis = SentinelGroup().start()
            broker = {
                "NEXOPOLL_REDIS_SENTINELS": self.redis.addresses,
                "NEXOPOLL_REDIS_SENTINEL_MASTER": MASTER,
                # the lock outlives the failover (~2-3 s): the holder keeps it
                "NEXOPOLL_BEAT_LOCK_TIMEOUT": "15",
            }
        else:
            self.redis = RedisServer(aof=True)
            self.redis.start()
            self.rabbit = RabbitNode(str(self.tmp / "rabbit")).start()
            broker = {"CELERY_BROKER_URL": self.rabbit.url, "NEXOPOLL_BEAT_LOCK_TIMEOUT": "6"}
        self.r = self.redis.client()  # under Sentinel: follows the current master
        self.pg = PrivateCluster()
        self.pg.init()
        self.sink = Sink().__enter__()
        config = self.tmp / "pollers.yaml"
        spec = [
            {
                "id": j,
                "kind": "scripted",
                "agent": "ana",
                "schedule": {"every_secs": self.every, "stagger_jitter_ms": int(self.every * 1000)},
                "config": {"deliver": {"channel": "webhook", "to": "ops"}},
            }
            for j in self.jobs
        ]
        config.write_text(
            yaml.safe_dump(
                {
                    "pollers": {"breaker_threshold": 1000, "default_jitter_ms": 0, "jobs": spec},
                    "agents": {
                        "ana": {"webhook": {"url": self.sink.url, "allow_private_networks": True}}
                    },
                }
            )
        )
        self.env = stack_env(
            self.redis.url,
            self.pg.url,
            str(config),
            NEXOPOLL_EXTRA_POLLERS="tests.support.testpollers:ScriptedPoller",
            **broker,
        )
        for args in (["migrate", "--noinput", "-v", "0"], ["pollers", "reload"]):
            subprocess.run(
                [sys.executable, "manage.py", *args],
                cwd=ROOT,
                env=self.env,
                check=True,
                capture_output=True,
                timeout=600,
            )
        for i in range(2):
            self.workers.append(self._worker(f"w{i}"))
        for i in range(2):
            self.beats.append(CeleryProc("beat", self.env, f"beat{i}").start())
        threading.Thread(target=self._sample_ticks, daemon=True).start()

    def _worker(self, name: str) -> CeleryProc:
        extra = ("-P", "threads", "-c", str(self.threads))
        return CeleryProc("worker", self.env, name, extra).start()

    def stop(self) -> None:
        self._stop.set()
        for p in self.beats + self.workers:
            p.stop(timeout=10)
        self.sink.__exit__(None, None, None)
        if self.rabbit is not None:
            self.rabbit.cleanup()
        self.pg.destroy()
        self.redis.stop()

    def describe(self) -> str:
        if self.sentinel:
            return "Redis primary + replica + 3 sentinels as broker and store"
        return "RabbitMQ broker"

    # --- measuring -------------------------------------------------------------------
    def _sample_ticks(self) -> None:
        names = [f"test:ticks:{j}" for j in self.jobs]
        while not self._stop.wait(0.25):
            try:
                total = sum(int(v or 0) for v in self.r.mget(names))
            except Exception:  # Redis down: no sample, the gap grows
                continue
            self._ticks.append((time.monotonic(), total))

    def gap_since(self, t0: float) -> float:
        """The longest stretch after ``t0`` without a completed tick."""
        last, gap, prev = t0, 0.0, None
        for t, total in list(self._ticks):
            if t < t0:
                prev = total
                continue
            if prev is not None and total > prev:
                gap, last = max(gap, t - last), t
            prev = total
        return max(gap, (self._ticks[-1][0] if self._ticks else t0) - last)

    def publish_round(self) -> list[tuple[str, int]]:
        out = []
        with self.r.pipeline(transaction=False) as pipe:
            for j in self.jobs:
                pipe.rpush(f"test:src:{j}", self.next_item[j])
                out.append((j, self.next_item[j]))
                self.next_item[j] += 1
            pipe.execute()
        return out

    def read_sink(self) -> None:
        reqs = self.sink.server.requests
        for req in reqs[self.tally.read :]:
            if req.method != "POST":
                continue
            body = json.loads(req.body or b"{}")
            item = body.get("payload", {}).get("item_id")
            if item is not None:
                key = (body.get("job_id"), int(item))
                self.tally.seen[key].append(req.header("X-Nexopoll-Delivery-Id"))
        self.tally.read = len(reqs)

    # --- one fault -------------------------------------------------------------------
    def phase(self, fault: str, inject) -> Row:
        items = self.publish_round()
        t0 = time.monotonic()
        note = inject()
        items += self.publish_round()
        deadline = time.monotonic() + DELIVER_TIMEOUT
        while time.monotonic() < deadline:
            self.read_sink()
            if all(k in self.tally.seen for k in items):
                break
            time.sleep(0.5)
        time.sleep(2 * self.every)  # late duplicates of the phase arrive too
        self.read_sink()
        row = Row(fault, gap=self.gap_since(t0), published=len(items), note=note or "")
        for k in items:
            ids = self.tally.seen.get(k, [])
            if ids:
                row.delivered += 1
                row.duplicated += len(ids) - 1
            if not ids or len(set(ids)) > 1:
                row.lost += 1  # never delivered, or delivered as two different deliveries
        return row

    def kill_worker(self) -> str:
        victim = self.workers.pop(0)
        victim.kill()
        self.workers.append(self._worker(f"w{len(self.workers) + 10}"))
        return f"{victim.name} SIGKILLed, replaced"

    def kill_beat(self) -> str:
        from nexopoll.runtime import keys

        holder = self.r.get(keys.heartbeat_key())
        pid = int(holder.split(":")[1]) if holder else None
        active = next((b for b in self.beats if b.proc and b.proc.pid == pid), self.beats[0])
        active.kill()
        self.beats.remove(active)
        wait_for(
            lambda: self.r.get(keys.heartbeat_key()) not in (None, holder),
            60,
            what="the standby beat took the lock",
        )
        self.beats.append(CeleryProc("beat", self.env, f"{active.name}r").start())
        return f"active beat (pid {pid}) SIGKILLed"

    def kill_redis_primary(self) -> str:
        # the items published so far are this script's input, not nexopoll's state: let the
        # replica have them (WAIT), so an asynchronous-replication loss is nexopoll's alone
        self.r.wait(1, 5000)
        old = self.redis.kill_primary()
        killed = time.monotonic()
        new = wait_for(lambda: self.redis.promoted(old), 60, interval=0.1, what="promotion")
        return (
            f"primary :{old} SIGKILLed; replica :{new} promoted "
            f"{time.monotonic() - killed:.1f} s later"
        )

    def kill_broker(self) -> str:
        self.rabbit.kill()
        time.sleep(DOWN_SECS)  # the fault itself: the broker stays down
        self.rabbit.start()
        return f"RabbitMQ SIGKILLed, restarted after {DOWN_SECS:g} s"

    def restart_postgres(self) -> str:
        self.pg.crash()
        time.sleep(DOWN_SECS)  # the fault itself: PostgreSQL stays down
        self.pg.start()
        return f"pg_ctl -m immediate stop, started after {DOWN_SECS:g} s"


def print_table(rows: list[Row], skipped: list[str]) -> None:
    head = f"{'fault':<12}{'gap s':>8}{'published':>11}{'delivered':>11}{'dup':>6}{'lost':>6}  note"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r.fault:<12}{r.gap:>8.1f}{r.published:>11}{r.delivered:>11}{r.duplicated:>6}"
            f"{r.lost:>6}  {r.note}"
        )
    for s in skipped:
        print(s)


def run_stack(chaos: Chaos, faults: list[str]) -> dict[str, Row]:
    """Start ``chaos``'s stack, let items flow, inject ``faults`` in order, stop it."""
    rows: dict[str, Row] = {}
    try:
        chaos.start()
        print(
            f"chaos: {chaos.n} jobs every {chaos.every:g} s, 2 workers, 2 beats, "
            f"{chaos.describe()}, private PostgreSQL; faults: {', '.join(faults)}",
            flush=True,
        )
        # items flow before the first fault
        first = chaos.publish_round()
        wait_for(
            lambda: chaos.read_sink() or all(k in chaos.tally.seen for k in first),
            DELIVER_TIMEOUT,
            interval=0.5,
            what="the first items delivered",
        )
        actions = {
            "worker": chaos.kill_worker,
            "beat": chaos.kill_beat,
            "redis": chaos.kill_redis_primary,
            "broker": chaos.kill_broker,
            "postgresql": chaos.restart_postgres,
        }
        for fault in faults:
            row = rows[fault] = chaos.phase(fault, actions[fault])
            print(f"  {fault}: done ({row.delivered}/{row.published} delivered)", flush=True)
    finally:
        chaos.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--every", type=float, help="seconds between a job's ticks (jobs/100)")
    ap.add_argument("--threads", type=int, default=16, help="threads per worker")
    ap.add_argument("--faults", default=",".join(FAULTS), help="comma-separated, in order")
    args = ap.parse_args(argv)
    faults = [f for f in args.faults.split(",") if f]
    unknown = set(faults) - set(FAULTS)
    if unknown:
        ap.error(f"unknown faults {sorted(unknown)}; choose from {', '.join(FAULTS)}")
    if rabbitmq_server() is None:
        print("chaos: rabbitmq-server is not installed (apt-get install rabbitmq-server)")
        return 2
    if not pg_tools_available():
        print("chaos: needs root, runuser and PostgreSQL 15's initdb/pg_ctl (private cluster)")
        return 2
    setup_django()
    every = args.every or max(2.0, args.jobs / 100)
    rows: dict[str, Row] = {}  # by fault, printed in the order asked
    skipped: list[str] = []
    started = time.monotonic()
    plain = [f for f in faults if f != "redis"]
    if plain:
        rows.update(run_stack(Chaos(args.jobs, every, args.threads), plain))
    if "redis" in faults:
        if sentinel_supported():  # its own stack: the store and broker under Sentinel
            rows.update(run_stack(Chaos(args.jobs, every, args.threads, sentinel=True), ["redis"]))
        else:
            skipped.append(
                "redis: skipped: this build has no Redis Sentinel support "
                "(NEXOPOLL_REDIS_SENTINELS); a primary kill needs a failover target"
            )
    table = [rows[f] for f in faults if f in rows]
    print()
    print_table(table, skipped)
    lost = sum(r.lost for r in table)
    print(f"\n{len(table)} faults in {time.monotonic() - started:.0f} s; lost {lost}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
