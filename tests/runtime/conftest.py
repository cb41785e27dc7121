from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from django.utils import timezone

from nexopoll import services
from nexopoll.runtime.tick import batch as tick_batch
from nexopoll.tasks import requeue_tick


class Config:
    """Writes pollers.yaml files and reloads them, for runtime tests."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, jobs: list[dict], agents: dict | None = None, **globals_) -> None:
        doc = {
            "pollers": {"default_jitter_ms": 0, **globals_, "jobs": jobs},
            "agents": agents or {"ana": {"log": {}}},
        }
        self.path.write_text(yaml.safe_dump(doc, sort_keys=False))

    def write_text(self, text: str) -> None:
        self.path.write_text(text)

    def reload(self, **kw):
        return services.reload_config(now=timezone.now(), path=self.path, **kw)


def scripted(job_id: str, every: float = 60, **extra) -> dict:
    spec = {
        "id": job_id,
        "kind": "scripted",
        "agent": "ana",
        "schedule": {"every_secs": every},
        "config": {"deliver": {"channel": "log", "to": "ops"}},
    }
    spec.update(extra)
    return spec


@pytest.fixture
def cfg(tmp_path, redis_client, transactional_db) -> Config:
    return Config(tmp_path / "pollers.yaml")


def run_batch(items, *, clock):
    """The batch as the ``nexopoll.tick_batch`` task runs it: spilled jobs and per-job
    retries go to the queue as single ticks."""
    return tick_batch.run_batch(items, clock=clock, requeue=requeue_tick)
