"""The reload's bulk writes (COPY on PostgreSQL, executemany on SQLite) store what the ORM
would, send long id lists in chunks, and a big reload tells how it goes."""

from __future__ import annotations

from datetime import UTC, datetime

from django.forms.models import model_to_dict
from django.utils import timezone

from nexopoll import reloadwrite, services
from nexopoll.models import PollJob, PollState
from nexopoll.runtime import keys
from nexopoll.runtime.tick import tick_job

from .conftest import scripted

NOW = datetime(2026, 11, 26, 9, 30, tzinfo=UTC)


def test_rows_are_stored_as_the_orm_stores_them(cfg):
    cfg.write(
        [
            scripted("plain"),
            scripted(
                "full",
                schedule={"cron": "0 */5 * * * *", "tz": "America/Bogota"},
                failure_to={"channel": "log", "to": 12345},
                paused_on_boot=True,
                host_limits={"in_flight": 2, "per_sec": 5},
                config={
                    "deliver": {"channel": "log", "to": "ops"},
                    "nested": [1, 2.5, None, {"ü": "x"}],
                },
            ),
        ],
        breaker_threshold=7,
    )
    services.reload_config(now=NOW, path=cfg.path)
    full = PollJob.objects.get(job_id="full")
    assert full.schedule == {"cron": "0 */5 * * * *", "tz": "America/Bogota"}
    assert full.failure_to == {"channel": "log", "to": "12345"}
    assert full.host_limits == {"in_flight": 2, "per_sec": 5}
    assert full.config["nested"] == [1, 2.5, None, {"ü": "x"}]
    assert (full.paused_on_boot, full.breaker_threshold, full.lease_ttl_factor) == (True, 7, 2.0)
    assert full.created_at == full.updated_at == NOW and full.source_line > 1
    plain = PollJob.objects.get(job_id="plain")
    assert plain.failure_to is None and plain.host_limits is None and not plain.paused_on_boot
    assert PollJob.objects.filter(failure_to__isnull=True).count() == 1  # SQL NULL, not 'null'
    # state rows: the model's defaults, the hash, paused_on_boot
    skip = ("job", "definition_hash", "paused", "paused_reason", "paused_by")  # job: its id
    default = model_to_dict(PollState(job_id="x"), exclude=skip)
    for job_id, paused in (("plain", False), ("full", True)):
        state = PollState.objects.get(job_id=job_id)
        assert model_to_dict(state, exclude=skip) == default
        assert state.definition_hash == PollJob.objects.get(job_id=job_id).definition_hash
        assert (state.paused, state.paused_reason) == (paused, "paused_on_boot" * paused)
        assert state.paused_by == "boot" * paused


def test_a_job_added_back_keeps_its_cursor_and_long_id_lists_go_in_chunks(
    cfg, redis_client, monkeypatch
):
    monkeypatch.setattr(reloadwrite, "CHUNK", 2)  # 12 ids: IN lists of two, then a scan
    monkeypatch.setattr(reloadwrite, "ROWS", 5)
    cfg.write([scripted(f"j{i:02}") for i in range(12)])
    cfg.reload()
    redis_client.rpush("test:src:j00", 1)
    tick_job("j00", now=timezone.now())
    cfg.write([scripted("j11")])
    assert len(cfg.reload().remove) == 11
    assert list(PollJob.objects.values_list("job_id", flat=True)) == ["j11"]
    assert PollState.objects.exclude(definition_hash="").count() == 1
    cfg.write([scripted(f"j{i:02}", paused_on_boot=i == 0) for i in range(12)])
    assert len(cfg.reload().add) == 11
    back = PollState.objects.get(job_id="j00")
    assert bytes(back.cursor) == b"1" and back.paused and back.paused_reason == "paused_on_boot"
    assert back.definition_hash == PollJob.objects.get(job_id="j00").definition_hash
    # the paused one's entry is installed (its hash says paused) but out of the schedule
    assert redis_client.zcard(keys.schedule_key()) == 11
    assert redis_client.zscore(keys.schedule_key(), keys.entry_key("j00")) is None
    assert len(redis_client.hgetall(keys.hashes_key())) == 12


def test_a_big_reload_tells_how_it_goes(cfg, monkeypatch, redis_client):
    lines: list[str] = []
    cfg.write([scripted(f"j{i}") for i in range(12)])
    cfg.reload(progress=lines.append)
    assert lines == []  # a small reload says nothing
    monkeypatch.setattr(services.reload, "PROGRESS_JOBS", 10)
    monkeypatch.setattr(reloadwrite, "ROWS", 2)
    cfg.write([scripted(f"j{i}", every=30) for i in range(12)] + [scripted("new")])
    cfg.reload(progress=lines.append)
    text = "\n".join(lines)
    assert "13 jobs read and validated" in text
    assert "1 to add, 12 to replace, 0 to remove" in text
    assert "poll_job: 10/13 rows" in text and "poll_job: 13/13 rows" in text
    assert "RedBeat: 13/13 entries written" in text
    assert all(line.startswith("reload ") and "s  " in line for line in lines)
