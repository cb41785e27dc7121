"""The stack fixture: real Redis, the test DB, Celery worker(s) and beat as subprocesses."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from django.db import connection
from django.utils import timezone

from nexopoll import services
from tests.support.procs import ROOT, CeleryProc, free_port, stack_env
from tests.support.sink import Sink


def database_url() -> str:
    s = connection.settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        return "sqlite:///" + str(Path(s["NAME"]).resolve())
    port = s.get("PORT") or 5432
    user, host = s.get("USER") or "postgres", s.get("HOST") or "127.0.0.1"
    return f"postgres://{user}@{host}:{port}/{s['NAME']}"


def job(job_id: str, every: float = 1, **extra) -> dict:
    spec = {
        "id": job_id,
        "kind": "scripted",
        "agent": "ana",
        "schedule": {"every_secs": every, "stagger_jitter_ms": 0},
        "config": {"deliver": {"channel": "webhook", "to": "ops"}},
    }
    spec.update(extra)
    return spec


def start_flower(env: dict[str, str], password: str) -> tuple[subprocess.Popen, int]:
    """Flower as its launcher builds it (basic auth ``ops:<password>``) on a free port, in
    its own session, its output to a temporary file; returns the process and the port."""
    from nexopoll.flower import FlowerSettings, flower_command

    port = free_port()
    conf = FlowerSettings(basic_auth=f"ops:{password}", port=port)
    cmd, child_env = flower_command(conf, env, [])
    log = tempfile.TemporaryFile()
    flower = subprocess.Popen(
        cmd, cwd=ROOT, env=child_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    return flower, port


class Stack:
    def __init__(self, redis_server, sink: Sink, tmp_path: Path) -> None:
        self.redis_server = redis_server
        self.redis = redis_server.client()
        self.sink = sink
        self.config = tmp_path / "pollers.yaml"
        self.procs: list[CeleryProc] = []
        self.env_extra: dict[str, str] = {}
        self.redis_url = redis_server.url
        self.binding_extra: dict[str, str] = {}

    def write(self, jobs: list[dict], **globals_) -> None:
        doc = {
            "pollers": {"breaker_threshold": 3, "default_jitter_ms": 0, **globals_, "jobs": jobs},
            "agents": {
                "ana": {
                    "webhook": {
                        "url": self.sink.url,
                        "allow_private_networks": True,
                        **self.binding_extra,
                    }
                }
            },
        }
        self.config.write_text(yaml.safe_dump(doc, sort_keys=False))

    def reload(self, **kw):
        return services.reload_config(now=timezone.now(), path=self.config, **kw)

    def env(self, **extra: str) -> dict[str, str]:
        env = {**self.env_extra, **extra}
        return stack_env(self.redis_url, database_url(), str(self.config), **env)

    def worker(
        self,
        name: str = "w1",
        prefix: list[str] | None = None,
        extra: tuple[str, ...] = (),
        **env: str,
    ) -> CeleryProc:
        proc = CeleryProc("worker", self.env(**env), name, extra, prefix=prefix).start()
        self.procs.append(proc)
        return proc

    def beat(self, name: str = "beat", wait: bool = True, **env: str) -> CeleryProc:
        proc = CeleryProc("beat", self.env(**env), name).start(wait=wait)
        self.procs.append(proc)
        return proc

    def publish(self, job_id: str, *ids: int) -> None:
        self.redis.rpush(f"test:src:{job_id}", *ids)

    def ticks(self, job_id: str) -> int:
        return int(self.redis.get(f"test:ticks:{job_id}") or 0)

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop(timeout=10)


@pytest.fixture
def stack(redis_server, transactional_db, tmp_path, monkeypatch):
    client = redis_server.client()
    client.flushall()
    monkeypatch.setenv("NEXOPOLL_CONFIG", str(tmp_path / "pollers.yaml"))
    with Sink() as sink:
        st = Stack(redis_server, sink, tmp_path)
        try:
            yield st
        finally:
            st.stop()
            client.flushall()


@pytest.fixture
def fault_stack(transactional_db, tmp_path, monkeypatch):
    """A Stack on a private redis-server (killed, paused, restarted by the test), with a
    canary secret in the webhook binding (``secret: ${NEXOPOLL_TEST_CANARY}``).

    ``fault_stack.redis_server`` is the :class:`RedisServer` (no persistence; set its
    ``aof`` and ``restart()`` it before starting processes for ``appendfsync everysec``).
    """
    from tests.support.invariants import CANARY, CANARY_VAR
    from tests.support.procs import RedisServer

    monkeypatch.setenv("NEXOPOLL_CONFIG", str(tmp_path / "pollers.yaml"))
    monkeypatch.setenv(CANARY_VAR, CANARY)
    server = RedisServer()
    server.start()
    with Sink() as sink:
        st = Stack(server, sink, tmp_path)
        st.binding_extra = {"secret": f"${{{CANARY_VAR}}}"}
        # short beat lock and loop: a takeover takes seconds, not half a minute
        st.env_extra.update(NEXOPOLL_BEAT_LOCK_TIMEOUT="3", NEXOPOLL_BEAT_MAX_LOOP="0.5")
        try:
            yield st
        finally:
            st.stop()
            server.stop()
