"""The admin's dry run polls on a worker: a slow source never holds the web request past
``NEXOPOLL_RUN_WAIT_SECS``; the page says it is still running and where to look."""

from __future__ import annotations

import re
import time

from django.test import Client

from nexopoll.models import Delivery, PollState
from tests.runtime.conftest import scripted
from tests.support.procs import wait_for

JOBS = "/admin/admin_ext/job/"


def test_a_slow_dry_run_shows_still_running_then_its_result(
    cfg, redis_client, operator, start_worker, settings
):
    settings.NEXOPOLL_RUN_WAIT_SECS = 1.0
    start_worker()
    cfg.write([scripted("a")])
    cfg.reload()
    redis_client.rpush("test:src:a", 1, 2)
    redis_client.set("test:block:a", 1)  # the source hangs until the test lets it go
    client = Client()
    client.force_login(operator)
    started = time.monotonic()
    page = client.post(JOBS, {"action": "dry_run", "_selected_action": ["a"]}).content.decode()
    assert time.monotonic() - started < 5
    assert "still running" in page and "Would deliver" not in page
    url = re.search(r'href="(/api/pollers/a/runs/[0-9a-f-]+)"', page).group(1)
    wait_for(lambda: redis_client.get("test:blocked:a"), 30, what="the tick on the worker")
    assert client.get(url).json()["state"] == "running"
    redis_client.delete("test:block:a")
    done = wait_for(lambda: (r := client.get(url).json())["state"] == "done" and r, 30)
    assert [d["payload"]["item_id"] for d in done["result"]["deliveries"]] == [1, 2]
    assert done["result"]["dry_run"] and not done["result"]["committed"]
    s = PollState.objects.get(job_id="a")
    assert s.cursor is None and s.ticks_total == 0 and not Delivery.objects.exists()
