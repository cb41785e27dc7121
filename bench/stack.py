"""Private stacks for the benchmark: a redis-server on a free port, a SQLite file in a
temp dir, ``manage.py`` subprocesses, Celery worker/beat processes and psutil CPU
accounting. Nothing here touches the machine's Redis on 6379 or the repo's ``data/``.
"""

from __future__ import annotations

import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import redis
import yaml
from celery import Celery
from kombu import Exchange, Queue

from tests.support.procs import ROOT, CeleryProc, RedisServer, stack_env, wait_for

QUEUE = "nexopoll"
KEY_PREFIX = "nexopoll:redbeat:"
NEXO_SCHEDULER = "nexopoll.runtime.beat:NexopollScheduler"
STOCK_SCHEDULER = "redbeat.RedBeatScheduler"

# Product defaults, undoing the shortened timings stack_env sets for the tests.
PRODUCT_ENV = {
    "NEXOPOLL_LEASE_MIN_SECS": "30",
    "NEXOPOLL_VISIBILITY_TIMEOUT": "540",
    "NEXOPOLL_UNACKED_RESTORE_THROTTLE": "0.1",
    "NEXOPOLL_RESYNC_SECS": "30",
    "NEXOPOLL_BEAT_LOCK_TIMEOUT": "30",
    "NEXOPOLL_BEAT_MAX_LOOP": "1.0",
    "NEXOPOLL_SWEEP_SECS": "15",
    "NEXOPOLL_EXTRA_POLLERS": "bench.noop:NoopPoller",
    # the workers and beats run at -l warning: nexopoll's own per-tick INFO lines too
    "NEXOPOLL_LOG_LEVEL": "WARNING",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_cpu(pid: int) -> float:
    """User+system CPU seconds of a process and its live children."""
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
        total += t.user + t.system
    return total


class Proc(CeleryProc):
    """A Celery worker/beat with an explicit command line (CeleryProc's is fixed)."""

    def __init__(self, role: str, env: dict[str, str], args: list[str], name: str) -> None:
        super().__init__(role, env, name)
        self.args = args

    def start(self, wait: bool = False) -> Proc:
        cmd = [sys.executable, "-m", "celery", "-A", "nexopoll", *self.args]
        with open(self.log, "ab") as fh:
            self.proc = subprocess.Popen(
                cmd, cwd=ROOT, env=self.env, stdout=fh, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        return self

    def cpu(self) -> float:
        assert self.proc is not None
        return tree_cpu(self.proc.pid)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def worker_args(concurrency: int, name: str, include: str = "") -> list[str]:
    args = [
        "worker",
        "-P",
        "prefork",
        "-c",
        str(concurrency),
        "-Q",
        QUEUE,
        "-n",
        f"{name}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-l",
        "warning",
    ]
    return args + (["-I", include] if include else [])


def beat_args(scheduler: str, workdir: Path) -> list[str]:
    return ["beat", "-l", "warning", "-S", scheduler, "--pidfile=", "-s", str(workdir / "beat-db")]


class Stack:
    """One private Redis + one SQLite DB (copied from a migrated template) + processes."""

    def __init__(self, template_db: Path, **env_extra: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="nexopoll-bench-"))
        self.db = self.dir / "db.sqlite3"
        shutil.copy(template_db, self.db)
        self.config = self.dir / "pollers.yaml"
        self.redis = RedisServer(free_port())
        self.redis.start()
        self.env = stack_env(
            self.redis.url, f"sqlite:///{self.db}", str(self.config), **{**PRODUCT_ENV, **env_extra}
        )
        self.procs: list[Proc] = []
        self._app: Celery | None = None

    @property
    def r(self) -> redis.Redis:
        return self.redis.client()

    def manage(self, *args: str) -> str:
        out = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{out.stderr[-3000:]}")
        return out.stdout

    def load_jobs(self, n: int, every: float) -> float:
        """Write n noop jobs every ``every`` s (jitter = one interval) and reload; return secs."""
        jobs = [
            {
                "id": job_id(i),
                "kind": "noop",
                "agent": "bench",
                "schedule": {"every_secs": every},
                "config": {},
            }
            for i in range(n)
        ]
        doc = {
            "pollers": {"default_jitter_ms": int(every * 1000), "jobs": jobs},
            "agents": {"bench": {}},
        }
        self.config.write_text(yaml.safe_dump(doc, sort_keys=False))
        started = time.monotonic()
        self.manage("pollers", "reload")
        return time.monotonic() - started

    def app(self) -> Celery:
        """A light publisher app routed like nexopoll's (nameless exchange → list 'nexopoll')."""
        if self._app is None:
            app = Celery("bench", broker=self.redis.url, set_as_current=False)
            app.conf.update(
                task_serializer="json", accept_content=["json"], task_default_queue=QUEUE,
                task_default_exchange="", task_default_routing_key=QUEUE,
                task_queues=(Queue(QUEUE, Exchange("", type="direct"), routing_key=QUEUE),),
                redbeat_redis_url=self.redis.url, redbeat_key_prefix=KEY_PREFIX,
            )  # fmt: skip
            self._app = app
        return self._app

    def start(self, role: str, args: list[str], name: str, **env: str) -> Proc:
        proc = Proc(role, {**self.env, **env}, args, name).start()
        self.procs.append(proc)
        return proc

    def queued(self) -> int:
        return int(self.r.llen(QUEUE)) + int(self.r.llen("celery"))

    def unacked(self) -> int:
        return int(self.r.hlen("unacked"))

    def sql(self, query: str) -> list[tuple]:
        with sqlite3.connect(self.db, timeout=30) as conn:
            return conn.execute(query).fetchall()

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.stop(timeout=15)
        self.redis.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.redis.dir, ignore_errors=True)


def job_id(i: int) -> str:
    return f"b{i:06d}"


def migrated_template() -> Path:
    """Migrate one SQLite file; every stack starts from a copy of it."""
    path = Path(tempfile.mkdtemp(prefix="nexopoll-bench-tpl-")) / "template.sqlite3"
    env = stack_env("redis://127.0.0.1:1/0", f"sqlite:///{path}", "/none.yaml", **PRODUCT_ENV)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    return path


__all__ = ["Stack", "migrated_template", "tree_cpu", "wait_for"]
