"""The stack fixture: real Redis, the test DB, Celery worker(s) and beat as subprocesses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from django.db import connection
from django.utils import timezone

from nexopoll import services
from tests.support.procs import CeleryProc, stack_env
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


class Stack:
    def __init__(self, redis_server, sink: Sink, tmp_path: Path) -> None:
        self.redis = redis_server.client()
        self.sink = sink
        self.config = tmp_path / "pollers.yaml"
        self.procs: list[CeleryProc] = []
        self.env_extra: dict[str, str] = {}
        self.redis_url = redis_server.url

    def write(self, jobs: list[dict], **globals_) -> None:
        doc = {
            "pollers": {"breaker_threshold": 3, "default_jitter_ms": 0, **globals_, "jobs": jobs},
            "agents": {"ana": {"webhook": {"url": self.sink.url, "allow_private_networks": True}}},
        }
        self.config.write_text(yaml.safe_dump(doc, sort_keys=False))

    def reload(self, **kw):
        return services.reload_config(now=timezone.now(), path=self.config, **kw)

    def env(self) -> dict[str, str]:
        return stack_env(self.redis_url, database_url(), str(self.config), **self.env_extra)

    def worker(self, name: str = "w1") -> CeleryProc:
        proc = CeleryProc("worker", self.env(), name).start()
        self.procs.append(proc)
        return proc

    def beat(self) -> CeleryProc:
        proc = CeleryProc("beat", self.env(), "beat").start()
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
