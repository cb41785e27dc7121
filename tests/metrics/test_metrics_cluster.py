"""One scrape of the web process sums the ticks of every prefork child of every worker.

Two Celery worker processes, two prefork children each, real Redis, the test DB.
Four ticks are held inside the poller at once, so each of the four children runs
one (their pids prove it); then more ticks are queued. The scrape (this process,
the real view) must show exactly the ticks the workers ran, by status, and the
same committed counts as the DB.
"""

from __future__ import annotations

import psutil
import pytest
from django.test import Client

from nexopoll.celery import app
from nexopoll.models import PollState
from tests.integration.conftest import job, stack  # noqa: F401 (the stack fixture)
from tests.support.procs import CeleryProc, wait_for

from .test_metrics import get, samples

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

JOBS = ["a", "b", "c", "d"]
MORE = 10  # further ticks queued per job after the first


def scrape() -> dict:
    response = Client().get("/metrics")
    assert response.status_code == 200
    return samples(response.content.decode())


def total(data, job_id: str) -> float:
    return sum(
        get(data, "poller_ticks_total", kind="scripted", agent="ana", job_id=job_id, status=s) or 0
        for s in ("ok", "transient", "permanent", "skipped")
    )


def test_ticks_from_two_children_of_two_workers_sum_up_in_one_scrape(stack):  # noqa: F811
    stack.write([job(j, every=3600) for j in JOBS])
    stack.reload()
    for j in JOBS:
        stack.publish(j, 1, 2)
    workers = [
        CeleryProc("worker", stack.env(), name, extra=("-c", "2")).start() for name in ("w1", "w2")
    ]
    stack.procs += workers
    r = stack.redis
    for j in JOBS:
        r.set(f"test:block:{j}", 1)
        app.send_task("nexopoll.tick", args=[j])
    # four ticks held in the poller at once: one in each of the four children
    wait_for(lambda: all(r.exists(f"test:blocked:{j}") for j in JOBS), 60, what="4 held ticks")
    held_pids = {int(r.get(f"test:blocked:{j}")) for j in JOBS}
    parents = {psutil.Process(pid).ppid() for pid in held_pids}
    assert len(held_pids) == 4
    assert parents == {w.proc.pid for w in workers}
    for j in JOBS:
        r.delete(f"test:block:{j}")
    for _ in range(MORE):
        for j in JOBS:
            app.send_task("nexopoll.tick", args=[j])
    wait_for(
        lambda: all(total(scrape(), j) == 1 + MORE for j in JOBS), 90, what="every tick counted"
    )
    data = scrape()
    for j in JOBS:
        ran = r.llen(f"test:done:{j}")  # the poller returned: the tick committed
        ok = get(data, "poller_ticks_total", kind="scripted", agent="ana", job_id=j, status="ok")
        skipped = get(
            data, "poller_ticks_total", kind="scripted", agent="ana", job_id=j, status="skipped"
        )
        assert ok == ran == PollState.objects.get(job_id=j).ticks_total
        assert (skipped or 0) == 1 + MORE - ran  # lease busy: another child held the job
        assert get(data, "poller_latency_ms_count", kind="scripted", job_id=j) == ran
        assert get(data, "poller_items_seen_total", kind="scripted", job_id=j) == 2 * ran
        assert get(data, "poller_items_dispatched_total", kind="scripted", job_id=j) == 2
    pids = {int(p) for j in JOBS for p in r.lrange(f"test:done:{j}", 0, -1)}
    assert held_pids <= pids


def test_beat_writes_its_dispatch_lag_and_lock(stack):  # noqa: F811
    stack.write([job("lag", every=1)])
    stack.reload()
    stack.worker()
    stack.beat()
    wait_for(
        lambda: (get(scrape(), "poller_beat_dispatch_lag_seconds_count") or 0) >= 3,
        60,
        what="beat's dispatch lag counted",
    )
    data = scrape()
    assert get(data, "poller_beat_lock_held") == 1
    count = get(data, "poller_beat_dispatch_lag_seconds_count")
    assert get(data, "poller_beat_dispatch_lag_seconds_bucket", le="+Inf") == count
    # once running, beat dispatches each slot within a second (start-up may be later)
    on_time = get(data, "poller_beat_dispatch_lag_seconds_bucket", le="1.0")

    def more_on_time() -> bool:
        return get(scrape(), "poller_beat_dispatch_lag_seconds_bucket", le="1.0") >= on_time + 2

    wait_for(more_on_time, 30, what="two more dispatches within a second of their slot")
    wait_for(lambda: total(scrape(), "lag") >= 2, 30, what="ticks of the beat's job counted")
