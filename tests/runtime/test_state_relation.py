"""``PollState.job``: a relation without a database constraint on the ``job_id`` column.
The state survives its job's removal (adding the job back resumes its cursor), and the
ORM joins state to job without a hand-written join."""

from __future__ import annotations

from django.db import connection

from nexopoll.models import PollJob, PollState
from nexopoll.runtime import store

from .conftest import scripted


def test_state_outlives_its_job_and_the_orm_joins_them(cfg, redis_client):
    cfg.write([scripted("a"), scripted("b")])
    cfg.reload()
    store.write_state([("a", {"cursor": b"7", "paused": True})])
    assert {j.job_id: j.state.paused for j in PollJob.objects.select_related("state")} == {
        "a": True,
        "b": False,
    }
    assert list(PollJob.objects.filter(state__paused=True).values_list("job_id", flat=True)) == [
        "a"
    ]
    assert PollState.objects.select_related("job").get(job_id="b").job.kind == "scripted"
    cfg.write([scripted("b")])
    cfg.reload()  # a removed: its definition row goes, its state row stays
    assert not PollJob.objects.filter(job_id="a").exists()
    assert bytes(PollState.objects.get(job_id="a").cursor) == b"7"
    cfg.write([scripted("a"), scripted("b")])
    cfg.reload()
    assert bytes(PollJob.objects.get(job_id="a").state.cursor) == b"7"


def test_the_column_is_still_job_id_with_no_foreign_key(db):
    seen = connection.introspection
    with connection.cursor() as cur:
        columns = [c.name for c in seen.get_table_description(cur, "poll_state")]
        constraints = seen.get_constraints(cur, "poll_state")
    assert "job_id" in columns and "job" not in columns
    assert not [c for c in constraints.values() if c["foreign_key"]]
    assert [c["columns"] for c in constraints.values() if c["primary_key"]] == [["job_id"]]
