"""No secret value in API output, even when a hostile source echoes one into its items."""

from __future__ import annotations

import json

from tests.support.httpserver import TestHTTPServer
from tests.tools.test_injection import CANARY, feed_job


def test_show_run_and_dry_run_mask_an_echoed_secret(api, cfg, monkeypatch, start_worker):
    monkeypatch.setenv("FEED_TOKEN", CANARY)
    start_worker()  # runs tick on a worker, which resolves ${FEED_TOKEN} from its environment

    def feed(req):
        body = {"items": [{"id": 1, "title": f"echo {req.header('Authorization')}"}]}
        return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()

    with TestHTTPServer() as server:
        server.route("GET", "/items", feed)
        cfg.write([feed_job(server.url("/items"))], agents={"ana": {"log": {}}})
        cfg.reload()
        dry = api.post("/api/pollers/feed/dry-run")
        run = api.post("/api/pollers/feed/run")
        show = api.get("/api/pollers/feed")
    assert dry.status_code == run.status_code == show.status_code == 200
    assert dry.json()["deliveries"][0]["payload"]["text"] == "echo Bearer ***"
    for r in (dry, run, show):
        assert CANARY not in r.content.decode()
    from django_celery_results.models import TaskResult  # the stored results are masked too

    assert TaskResult.objects.count() == 2
    assert all(CANARY not in str(row.result) for row in TaskResult.objects.all())
    assert show.json()["config"]["headers"]["Authorization"] == "Bearer ${FEED_TOKEN}"
