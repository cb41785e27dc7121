"""Two deployments on one Redis (NEXOPOLL_REDIS_PREFIX): each ticks its own jobs only,
and their queues, RedBeat schedules, beat locks, histories and metrics do not mix."""

from __future__ import annotations

import pytest
import yaml

from nexopoll.runtime import history, metricstore
from tests.support.procs import CeleryProc, run_manage, stack_env, wait_for

from .conftest import job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def other_deployment(stack, tmp_path, prefix: str) -> dict[str, str]:
    """A second deployment: its own DB (SQLite) and pollers.yaml, the same Redis."""
    config = tmp_path / "other.yaml"
    doc = {
        "pollers": {"default_jitter_ms": 0, "jobs": [job("b1")]},
        "agents": {"ana": {"webhook": {"url": stack.sink.url, "allow_private_networks": True}}},
    }
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    env = stack_env(
        stack.redis_url,
        f"sqlite:///{tmp_path / 'other.sqlite3'}",
        str(config),
        NEXOPOLL_REDIS_PREFIX=prefix,
    )
    for args in (("migrate", "--noinput", "-v", "0"), ("pollers", "reload")):
        done = run_manage(env, *args)
        assert done.returncode == 0, done.stderr
    return env


def test_two_prefixes_share_one_redis(stack, tmp_path):
    # deployment A: the default prefix (today's key names), the test DB
    stack.write([job("a1")])
    stack.reload()
    env_b = other_deployment(stack, tmp_path, "other")
    stack.publish("a1", 1, 2)
    stack.publish("b1", 7, 8)
    worker_a, beat_a = stack.worker("wa"), stack.beat("beat-a")
    procs = [CeleryProc("worker", env_b, "wb").start(), CeleryProc("beat", env_b, "beat-b").start()]
    stack.procs += procs
    worker_b, beat_b = procs
    wait_for(lambda: stack.ticks("a1") >= 2 and stack.ticks("b1") >= 2, 60, what="both tick")
    wait_for(
        lambda: (
            set(stack.sink.item_ids("a1")) == {1, 2} and set(stack.sink.item_ids("b1")) == {7, 8}
        ),
        30,
        what="both deliver",
    )

    r = stack.redis
    # each worker ran its own deployment's ticks only
    assert "job=a1" in worker_a.text() and "job=b1" not in worker_a.text()
    assert "job=b1" in worker_b.text() and "job=a1" not in worker_b.text()
    # the default prefix keeps today's names; the other prefix owns every key it wrote
    assert r.exists("nexopoll:redbeat::schedule") and r.exists("other:redbeat::schedule")
    assert r.exists("nexopoll:redbeat::lock") and r.exists("other:redbeat::lock")
    assert r.zrange("nexopoll:redbeat::schedule", 0, -1) != r.zrange(
        "other:redbeat::schedule", 0, -1
    )
    assert r.exists(history.list_key("a1")) and not r.exists("nexopoll:history:b1")
    assert r.exists("other:history:b1") and not r.exists("other:history:a1")
    ticks_a = r.hkeys(metricstore.TICKS)
    ticks_b = r.hkeys("other:metrics:ticks")
    assert any("a1" in k for k in ticks_a) and not any("b1" in k for k in ticks_a)
    assert any("b1" in k for k in ticks_b) and not any("a1" in k for k in ticks_b)
    assert (
        r.exists("other:unacked_mutex")
        or r.exists("other:_kombu.binding.celeryev")
        or any(k.startswith("other:_kombu") for k in r.scan_iter("other:*"))
    )  # kombu's own keys of B are under its prefix too
    assert beat_a.proc.poll() is None and beat_b.proc.poll() is None
