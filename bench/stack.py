"""Private stacks for the benchmark: a redis-server on a free port, a SQLite file in a
temp dir (or, with ``--db postgres``, a database of its own on the local PostgreSQL,
created from a template and dropped afterwards), ``manage.py`` subprocesses, Celery
worker/beat processes and psutil CPU accounting. Nothing here touches the machine's
Redis on 6379 or the repo's ``data/``.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import redis
import yaml
from celery import Celery
from kombu import Exchange, Queue

from tests.support.procs import ROOT, CeleryProc, RedisServer, stack_env, wait_for

QUEUE = "nexopoll"  # ticks; deliveries go to DELIVERIES (nexopoll settings: task_routes)
DELIVERIES = "nexopoll.deliveries"
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


# --db: "sqlite", or a PostgreSQL URL whose database name prefixes every bench database
DB = {"pg": ""}


def use_postgres(url: str) -> None:
    """Run every stack on PostgreSQL at ``url`` (its path: a prefix for our databases)."""
    DB["pg"] = url.rstrip("/")


def _pg_base() -> tuple[str, str]:
    base, _, prefix = DB["pg"].rpartition("/")
    return base + "/", prefix or "nexopoll_bench"


def _pg_admin(*statements: str) -> None:
    import psycopg

    with psycopg.connect(_pg_base()[0] + "postgres", autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def pg_clone(template: str) -> str:
    """A new database copied from ``template`` (CREATE DATABASE ... TEMPLATE)."""
    name = f"{_pg_base()[1]}_{uuid.uuid4().hex[:8]}"
    _pg_admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    return name


def pg_drop(name: str) -> None:
    _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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


def postgres_cpu() -> float:
    """User+system CPU seconds of the local PostgreSQL server so far: the postmaster, its
    live backends and the backends it has reaped (every database on it counts)."""
    for proc in psutil.process_iter(["name", "ppid"]):
        try:
            if proc.info["name"] != "postgres":
                continue
            if psutil.Process(proc.info["ppid"]).name() == "postgres":
                continue  # a backend: the postmaster counts it
            t = proc.cpu_times()
            children = proc.children()
        except psutil.Error:
            continue
        total = t.user + t.system + t.children_user + t.children_system
        for child in children:
            try:  # a backend that ended meanwhile is in children_* by the next reading
                c = child.cpu_times()
            except psutil.Error:
                continue
            total += c.user + c.system
        return total
    return 0.0


class Proc(CeleryProc):
    """A Celery worker/beat with an explicit command line (CeleryProc's is fixed)."""

    def __init__(
        self, role: str, env: dict[str, str], args: list[str], name: str, module: str = "celery"
    ) -> None:
        super().__init__(role, env, name)
        self.args = args
        self.module = module  # "nexopoll.workers": the Procfile's worker launcher

    def start(self, wait: bool = False) -> Proc:
        prefix = ["-A", "nexopoll"] if self.module == "celery" else []
        cmd = [sys.executable, "-m", self.module, *prefix, *self.args]
        with open(self.log, "ab") as fh:
            self.proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                env=self.env,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def cpu(self) -> float:
        assert self.proc is not None
        return tree_cpu(self.proc.pid)

    def rss(self) -> list[float]:
        """Resident MB of the main process and of each live child (pool processes)."""
        assert self.proc is not None
        try:
            root = psutil.Process(self.proc.pid)
            return [p.memory_info().rss / 2**20 for p in [root, *root.children(recursive=True)]]
        except psutil.NoSuchProcess:
            return []

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def worker_args(concurrency: int, name: str, include: str = "", pool: str = "prefork") -> list[str]:
    args = [
        "worker",
        "-P",
        pool,
        "-c",
        str(concurrency),
        "-Q",
        f"{QUEUE},{DELIVERIES}",
        "-n",
        f"{name}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-l",
        "warning",
    ]
    return args + (["-I", include] if include else [])


# what every worker process of ``python -m nexopoll.workers`` (the Procfile's worker as
# shipped, sized by NEXOPOLL_WORKER_*) gets besides its own arguments
LAUNCHER_ARGS = ["-Q", f"{QUEUE},{DELIVERIES}", "--without-heartbeat", "-l", "warning"]


def beat_args(scheduler: str, workdir: Path) -> list[str]:
    return ["beat", "-l", "warning", "-S", scheduler, "--pidfile=", "-s", str(workdir / "beat-db")]


class Stack:
    """One private Redis + one SQLite DB (copied from a migrated template) + processes."""

    def __init__(self, template_db: Path | str, **env_extra: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="nexopoll-bench-"))
        self.db = self.dir / "db.sqlite3"
        self.pg = ""
        if isinstance(template_db, str):  # a PostgreSQL template database
            self.pg = pg_clone(template_db)
            url = _pg_base()[0] + self.pg
        else:
            shutil.copy(template_db, self.db)
            url = f"sqlite:///{self.db}"
        self.config = self.dir / "pollers.yaml"
        self.redis = RedisServer(free_port())
        self.redis.start()
        self.env = stack_env(self.redis.url, url, str(self.config), **{**PRODUCT_ENV, **env_extra})
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

    def load_jobs(
        self,
        n: int,
        every: float,
        url: str = "",
        limits: dict | None = None,
        hosts: int = 1,
        kind: str = "webhook_poll",
    ) -> float:
        """Write n noop jobs every ``every`` s (jitter = one interval) and reload; return secs.

        With ``url``: ``kind`` jobs (``webhook_poll`` or ``rss``) polling ``<url>/<job id>``
        instead, with ``limits`` as their ``host_limits`` (None: the defaults), spread over
        ``hosts`` loopback addresses (job i on 127.0.0.(i % hosts + 1))."""

        def config(i: int) -> dict:
            if not url:
                return {}
            u = url.replace("127.0.0.1", f"127.0.0.{i % hosts + 1}", 1) + f"/{job_id(i)}"
            common = {"deliver": {"channel": "log", "to": "bench"}, "allow_private_networks": True}
            if kind == "rss":
                return {"feed_url": u, "first_run": "skip", **common}
            return {"url": u, "items_path": "", **common}

        jobs = [
            {
                "id": job_id(i),
                "kind": kind if url else "noop",
                "agent": "bench",
                "schedule": {"every_secs": every},
                "config": config(i),
                **({"host_limits": dict(limits)} if url and limits else {}),
            }
            for i in range(n)
        ]
        doc = {
            "pollers": {"default_jitter_ms": int(every * 1000), "jobs": jobs},
            "agents": {"bench": {"log": {}}},
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
                task_serializer="json",
                accept_content=["json"],
                task_default_queue=QUEUE,
                task_default_exchange="",
                task_default_routing_key=QUEUE,
                task_queues=(Queue(QUEUE, Exchange("", type="direct"), routing_key=QUEUE),),
                redbeat_redis_url=self.redis.url,
                redbeat_key_prefix=KEY_PREFIX,
            )
            self._app = app
        return self._app

    def start(
        self, role: str, args: list[str], name: str, module: str = "celery", **env: str
    ) -> Proc:
        proc = Proc(role, {**self.env, **env}, args, name, module).start()
        self.procs.append(proc)
        return proc

    def service_cpu(self) -> dict[str, float]:
        """CPU seconds so far of the stack's Redis and, on PostgreSQL, of the server."""
        return {"redis": tree_cpu(self.redis.pid), "db": postgres_cpu() if self.pg else 0.0}

    def queued(self) -> int:
        return sum(int(self.r.llen(q)) for q in (QUEUE, DELIVERIES, "celery"))

    def queued_ticks(self) -> int:
        """Ticks waiting in the queue: a ``nexopoll.tick_batch`` message counts its jobs."""
        n = 0
        for raw in self.r.lrange(QUEUE, 0, -1) + self.r.lrange("celery", 0, -1):
            envelope = json.loads(raw)
            if envelope["headers"].get("task") == "nexopoll.tick_batch":
                n += len(json.loads(base64.b64decode(envelope["body"]))[0][0])
            else:
                n += 1
        return n

    def unacked(self) -> int:
        return int(self.r.hlen("unacked"))

    def sql(self, query: str) -> list[tuple]:
        if self.pg:
            import psycopg

            with psycopg.connect(_pg_base()[0] + self.pg, autocommit=True) as conn:
                cur = conn.execute(query)
                return cur.fetchall() if cur.description else []  # an UPDATE: no rows
        with sqlite3.connect(self.db, timeout=30) as conn:
            return conn.execute(query).fetchall()

    def snapshot(self, name: str) -> Path | str:
        """A copy of this stack's DB as it is now (a template for later stacks)."""
        if self.pg:
            return pg_clone(self.pg)
        path = Path(tempfile.gettempdir()) / f"nexopoll-bench-{name}-{uuid.uuid4().hex[:6]}.db"
        path.write_bytes(self.db.read_bytes())
        return path

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.stop(timeout=15)
        if self.pg:
            pg_drop(self.pg)
        self.redis.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.redis.dir, ignore_errors=True)


def job_id(i: int) -> str:
    return f"b{i:06d}"


def migrated_template() -> Path | str:
    """Migrate one SQLite file (or PostgreSQL database); every stack starts from a copy."""
    if DB["pg"]:
        base, prefix = _pg_base()
        name = f"{prefix}_tpl"
        pg_drop(name)
        _pg_admin(f'CREATE DATABASE "{name}"')
        url, path = base + name, name
    else:
        path = Path(tempfile.mkdtemp(prefix="nexopoll-bench-tpl-")) / "template.sqlite3"
        url = f"sqlite:///{path}"
    env = stack_env("redis://127.0.0.1:1/0", url, "/none.yaml", **PRODUCT_ENV)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    return path


__all__ = ["Stack", "migrated_template", "tree_cpu", "wait_for"]
