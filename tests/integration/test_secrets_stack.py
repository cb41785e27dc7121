"""No secret in the worker's log file, the DB or an alert, with a real Celery worker and beat:
a feed URL and a webhook URL held whole in ``${VAR}``s, both failing."""

from __future__ import annotations

import pytest
import yaml

from nexopoll.models import Delivery, PollState
from tests.support.procs import free_port, wait_for
from tests.support.secrets import assert_no_secret

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_worker_log_and_db_hold_no_secret_of_failing_urls(stack, monkeypatch):
    feed = f"http://LOCALHOST:{free_port()}/feeds/F33dT0ken-8c7b6a5d/items?key=Qu3ryK3y-1a2b"
    hook = f"http://localhost:{free_port()}/services/T0ZZ/B0YY/W3bh00kS3cret-4d5e6f"
    for name, value in {"FEED_URL": feed, "HOOK_URL": hook}.items():
        monkeypatch.setenv(name, value)
        stack.env_extra[name] = value
    doc = {
        "pollers": {
            "breaker_threshold": 1,
            "default_jitter_ms": 0,
            "jobs": [
                {
                    "id": "w",
                    "kind": "webhook_poll",
                    "agent": "ana",
                    "schedule": {"every_secs": 1, "stagger_jitter_ms": 0},
                    "config": {
                        "url": "${FEED_URL}",
                        "items_path": "items",
                        "message_template": "{t}",
                        "deliver": {"channel": "webhook", "to": "ops"},
                        "allow_private_networks": True,
                    },
                    "failure_to": {"channel": "webhook", "to": "oncall"},
                }
            ],
        },
        "agents": {"ana": {"webhook": {"url": "${HOOK_URL}", "allow_private_networks": True}}},
    }
    stack.config.write_text(yaml.safe_dump(doc, sort_keys=False))
    stack.reload()
    worker = stack.worker()
    stack.beat()
    wait_for(lambda: PollState.objects.get(job_id="w").last_error, 30, what="a failed tick")
    wait_for(
        lambda: Delivery.objects.filter(purpose="alert").exclude(last_error="").exists(),
        30,
        what="a failed alert delivery",
    )
    log = worker.text()
    assert "tick.done job=w" in log and "delivery.retry" in log  # the errors were logged
    state = PollState.objects.get(job_id="w")
    alert = Delivery.objects.get(purpose="alert")
    stored = f"{state.last_error}\n{state.paused_reason}\n{alert.payload}\n{alert.last_error}"
    assert "request failed" in state.last_error and "request failed" in alert.last_error
    assert_no_secret(log + stored, feed, hook)
