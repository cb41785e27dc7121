"""End to end: a worker started without a binding's ${VAR} holds the row; after the
worker is restarted with it, a reload alone gets the row sent (no manual step)."""

from __future__ import annotations

import pytest
import yaml
from django.utils import timezone

from nexopoll.models import Delivery
from nexopoll.runtime.tick import tick_job
from tests.support.procs import CeleryProc, wait_for

from .conftest import job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SECRET = "whsec-CANARY-integration-77"


def test_a_row_held_in_the_worker_is_sent_after_the_worker_is_fixed_and_reloaded(
    stack, monkeypatch
):
    monkeypatch.setenv("HOOK_SECRET", SECRET)  # the operator's shell has it; the worker not
    binding = {"url": stack.sink.url, "allow_private_networks": True, "secret": "${HOOK_SECRET}"}
    doc = {
        "pollers": {"default_jitter_ms": 0, "jobs": [job("h", every=3600)]},
        "agents": {"ana": {"webhook": binding}},
    }
    stack.config.write_text(yaml.safe_dump(doc, sort_keys=False))
    stack.reload()
    without = {k: v for k, v in stack.env().items() if k != "HOOK_SECRET"}
    w1 = CeleryProc("worker", without, "w1").start()
    stack.procs.append(w1)

    stack.publish("h", 1)
    (row_id,) = tick_job("h", now=timezone.now()).delivery_ids  # queued after the commit

    def status() -> str:
        return Delivery.objects.get(id=row_id).status

    wait_for(lambda: status() == "held", 30, what="the worker to hold the row")
    row = Delivery.objects.get(id=row_id)
    assert "HOOK_SECRET is not set" in row.last_error and row.attempts == 0
    assert stack.sink.hits == []

    w1.stop()
    stack.procs.append(CeleryProc("worker", stack.env(), "w2").start())  # now with the var
    stack.reload()  # held rows go back to pending and are queued
    wait_for(lambda: status() == "sent", 30, what="the row sent after the reload")
    (hit,) = stack.sink.hits
    assert hit["delivery_id"] == row_id and hit["signature"].startswith("sha256=")
    assert SECRET not in w1.text()
