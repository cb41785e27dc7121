"""The per-process definitions cache: a reload that replaces one job costs one small
query per worker, not a reload of every job; threads of one worker share it safely."""

from __future__ import annotations

import threading

from django.db import connection
from django.test.utils import CaptureQueriesContext

from nexopoll.models import Agent, PollJob, PollState
from nexopoll.runtime import definitions, logredact

from .conftest import scripted


def job_selects(queries) -> list[str]:
    return [q["sql"] for q in queries if 'FROM "poll_job"' in q["sql"]]


def hash_of(job_id: str) -> str:
    return PollState.objects.get(job_id=job_id).definition_hash


def test_replacing_one_job_loads_that_job_alone(cfg, monkeypatch):
    monkeypatch.setattr(definitions, "BULK_LOAD_EVERY_SECS", 0.0)  # a minute has passed
    cfg.write([scripted(f"j{i}") for i in range(50)])
    cfg.reload()
    definitions.forget()
    with CaptureQueriesContext(connection) as q:
        assert definitions.get("j1", hash_of("j1")).job_id == "j1"  # cold: one bulk load
    (bulk,) = job_selects(q.captured_queries)
    assert "WHERE" not in bulk
    cfg.write([scripted(f"j{i}", every=30 if i == 7 else 60) for i in range(50)])
    cfg.reload()
    with CaptureQueriesContext(connection) as q:
        for i in range(50):
            jd = definitions.get(f"j{i}", hash_of(f"j{i}"))
            assert jd is not None and jd.definition_hash == hash_of(f"j{i}")
    (single,) = job_selects(q.captured_queries)  # only the replaced job was read again
    assert "WHERE" in single and "j7" in str(q.captured_queries)
    j7, j1 = definitions.get("j7", hash_of("j7")), definitions.get("j1", hash_of("j1"))
    assert j7.schedule != j1.schedule


def test_many_misses_fall_back_to_one_bulk_load(cfg, monkeypatch):
    monkeypatch.setattr(definitions, "BULK_LOAD_MISSES", 5)
    monkeypatch.setattr(definitions, "BULK_LOAD_EVERY_SECS", 0.0)
    cfg.write([scripted(f"j{i}") for i in range(20)])
    cfg.reload()
    definitions.forget()
    definitions.get("j0", hash_of("j0"))
    cfg.write([scripted(f"j{i}", every=30) for i in range(20)])  # every job replaced
    cfg.reload()
    with CaptureQueriesContext(connection) as q:
        for i in range(20):
            assert definitions.get(f"j{i}", hash_of(f"j{i}")) is not None
    selects = job_selects(q.captured_queries)
    assert len(selects) < 20 and any("WHERE" not in s for s in selects)


def test_threads_share_the_cache_and_load_everything_once(cfg):
    cfg.write([scripted(f"j{i}") for i in range(30)])
    cfg.reload()
    hashes = dict(PollState.objects.values_list("job_id", "definition_hash"))
    definitions.forget()
    barrier, errors, queries = threading.Barrier(8), [], []

    def worker(n: int) -> None:
        try:
            with CaptureQueriesContext(connection) as q:
                barrier.wait(10)
                for i in range(30):
                    jid = f"j{(i + n) % 30}"
                    assert definitions.get(jid, hashes[jid]).job_id == jid
            queries.extend(job_selects(q.captured_queries))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert len(queries) == 1 and "WHERE" not in queries[0]  # one bulk load for 8 threads


def test_plain_row_load_builds_what_the_model_row_builds(cfg, monkeypatch):
    monkeypatch.setenv("LOAD_TOKEN", "tok-3f9e8d7c6b5a")
    cfg.write(
        [
            scripted("every", every=45, schedule={"every_secs": 45, "stagger_jitter_ms": 900}),
            scripted(
                "cron",
                schedule={"cron": "0 */5 * * * *", "tz": "America/Bogota"},
                failure_to={"channel": "log", "to": "oncall"},
            ),
            scripted("at", schedule={"at": "2026-04-26T15:00:00Z"}),
            scripted(
                "limits",
                kind="webhook_poll",
                host_limits={"in_flight": 3},
                config={
                    "url": "https://example.org/${LOAD_TOKEN}",
                    "items_path": "items",
                    "deliver": {"channel": "log", "to": "ops"},
                },
            ),
        ]
    )
    cfg.reload()
    bindings = dict(Agent.objects.values_list("agent_id", "bindings"))
    logredact.reset()
    loaded = {jd.job_id: jd for jd in definitions.load_all()}
    assert loaded == {
        job.job_id: definitions.from_row(job, bindings.get(job.agent, {}))
        for job in PollJob.objects.all()
    }
    assert "tok-3f9e8d7c6b5a" in logredact.known()  # the configs' secrets are masked
    # most of the table asked for by id: one scan, filtered
    monkeypatch.setattr(definitions, "_CHUNK", 1)
    assert [jd.job_id for jd in definitions.load_all(["at", "cron"] * 25)] == ["at", "cron"]


def test_a_warming_worker_serves_a_miss_with_that_job_alone(cfg):
    """While a worker's background bulk load runs, a tick's miss loads its own job
    instead of waiting; once it ends every job is a hit."""
    cfg.write([scripted(f"j{i}") for i in range(40)])
    cfg.reload()
    definitions.forget()
    with definitions._lock:  # the bulk load is held up (a slow DB, 100,000 jobs)
        definitions.warm_in_background()
        with CaptureQueriesContext(connection) as q:
            assert definitions.get("j3", hash_of("j3")).job_id == "j3"
        (single,) = job_selects(q.captured_queries)
        assert "WHERE" in single and "j3" in single
    assert definitions.wait_warm(30)
    with CaptureQueriesContext(connection) as q:
        for i in range(40):
            assert definitions.get(f"j{i}", hash_of(f"j{i}")).job_id == f"j{i}"
    assert not job_selects(q.captured_queries)
    # after a reload that replaces every job, the misses pile up: the bulk load runs in
    # the background again while each miss is served alone
    cfg.write([scripted(f"j{i}", every=30) for i in range(40)])
    cfg.reload()
    definitions._bulk_loaded_at = float("-inf")
    definitions.BULK_LOAD_MISSES, before = 5, definitions.BULK_LOAD_MISSES
    try:
        for i in range(40):
            jd = definitions.get(f"j{i}", hash_of(f"j{i}"))
            assert jd.definition_hash == hash_of(f"j{i}")
        assert definitions.wait_warm(30) and definitions._misses < 40
    finally:
        definitions.BULK_LOAD_MISSES = before
        definitions.forget()
