"""Many jobs at once, written straight to the DB (the 10,000-job tests)."""

from __future__ import annotations

from collections.abc import Iterable

from nexopoll.models import PollJob


def scripted_job_rows(ids: Iterable[str]) -> None:
    """A ``PollJob`` row per id: kind scripted, agent ana, every 60 s, no config,
    definition hash ``h``; inserted 1,000 at a time."""
    rows = [
        PollJob(
            job_id=j,
            kind="scripted",
            agent="ana",
            schedule={"every_secs": 60},
            config={},
            definition_hash="h",
        )
        for j in ids
    ]
    PollJob.objects.bulk_create(rows, batch_size=1000)
