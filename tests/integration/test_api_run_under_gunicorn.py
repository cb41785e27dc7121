"""RELIABILITY (issue 16): a run of a slow source through the API under gunicorn.

gunicorn kills a web worker whose request outlasts ``--timeout`` (30 s in
production, 3 s here). A source slower than that used to make ``POST .../run`` a
500, kill the web worker and record nothing. Now the tick runs on a Celery worker:
the API answers 202 within ``NEXOPOLL_RUN_WAIT_SECS`` (1 s here), the web worker
lives, and the status URL gives the committed result once the source answers.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
import requests

from nexopoll.models import Delivery, PollState
from tests.support.httpserver import TestHTTPServer
from tests.support.procs import answers_200, free_port, start_gunicorn, wait_for

pytestmark = pytest.mark.integration
TOKEN = "gunicorn-run-token-" + "x" * 20


def test_a_source_slower_than_gunicorns_timeout_is_a_202_then_a_result(stack, tmp_path):
    gate, reached = threading.Event(), threading.Event()

    def items(req):
        reached.set()
        gate.wait(60)
        body = {"items": [{"id": 1, "title": "one"}]}
        return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()

    with TestHTTPServer() as source:
        source.route("GET", "/items", items)
        stack.write(
            [
                {
                    "id": "slow",
                    "kind": "webhook_poll",
                    "agent": "ana",
                    "schedule": {"every_secs": 3600},
                    "config": {
                        "url": source.url("/items"),
                        "items_path": "items",
                        "message_template": "{title}",
                        "allow_private_networks": True,
                        "deliver": {"channel": "webhook", "to": "ops"},
                    },
                }
            ]
        )
        stack.reload()
        stack.worker()
        port = free_port()
        env = stack.env(
            NEXOPOLL_API_TOKEN=TOKEN,
            NEXOPOLL_RUN_WAIT_SECS="1",
            DJANGO_SECRET_KEY="gunicorn-run-test-" + "k" * 40,
        )
        log = tmp_path / "gunicorn.log"
        with open(log, "wb") as out:
            web = start_gunicorn(env, port, out, "--timeout", "3")
        base, auth = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {TOKEN}"}
        try:
            wait_for(lambda: answers_200(f"{base}/api/pollers", auth), 60, what="gunicorn up")
            started = time.monotonic()
            try:
                r = requests.post(f"{base}/api/pollers/slow/run", headers=auth, timeout=20)
                took = time.monotonic() - started
                assert reached.wait(30)  # the worker polls the source, not gunicorn
                time.sleep(0 if took > 4 else 4 - took)  # past gunicorn's timeout on purpose
            finally:
                gate.set()
            assert r.status_code == 202, (r.status_code, r.text[:300])
            assert took < 3, took
            url = base + r.json()["status_url"]
            done = wait_for(
                lambda: (
                    (b := requests.get(url, headers=auth, timeout=5).json())["state"] == "done"
                    and b
                ),
                30,
            )
            assert done["result"]["committed"] and done["result"]["status"] == "ok"
            assert "WORKER TIMEOUT" not in log.read_text(errors="replace")
        finally:
            web.terminate()
            web.wait(10)
    assert PollState.objects.get(job_id="slow").ticks_total == 1
    assert Delivery.objects.filter(job_id="slow").count() == 1
