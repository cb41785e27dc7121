"""/api/deliveries: the outbox listed and redelivered, checked in the DB."""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.utils import timezone

from nexopoll.models import Delivery
from tests.support.outbox import outbox_row

from .test_pollers_api import error


def row(status: str, minutes_ago: int, job_id: str = "alpha") -> Delivery:
    at = timezone.now() - timedelta(minutes=minutes_ago)
    return outbox_row(
        job_id,
        at=at,
        payload={"text": "x"},
        status=status,
        attempts=3,
        last_error="boom" if status == "dead" else "",
    )


def test_list_filters_and_pages_newest_first(api, jobs):
    rows = [row("sent", 5), row("dead", 4), row("pending", 3), row("dead", 2, job_id="beta")]
    body = api.get("/api/deliveries").json()
    assert [d["id"] for d in body["items"]] == [str(r.id) for r in reversed(rows)]
    assert "payload" not in body["items"][0]  # polled content stays in the outbox
    dead = api.get("/api/deliveries?status=dead").json()["items"]
    assert {d["id"] for d in dead} == {str(rows[1].id), str(rows[3].id)}
    assert dead[0]["last_error"] == "boom" and dead[0]["attempts"] == 3
    assert len(api.get("/api/deliveries?job_id=beta").json()["items"]) == 1
    p1 = api.get("/api/deliveries?limit=3").json()
    assert len(p1["items"]) == 3 and p1["next_after"] == str(rows[1].id)
    p2 = api.get(f"/api/deliveries?limit=3&after={p1['next_after']}").json()
    assert [d["id"] for d in p2["items"]] == [str(rows[0].id)] and p2["next_after"] is None
    error(api.get("/api/deliveries?status=lost"), 400)
    error(api.get("/api/deliveries?after=not-a-uuid"), 400)
    error(api.get(f"/api/deliveries?after={uuid.uuid4()}"), 404)


def test_redeliver_dead_row(api, jobs, redis_client):
    dead = row("dead", 1)
    r = api.post(f"/api/deliveries/{dead.id}/redeliver")
    assert r.status_code == 200 and r.json()["redelivered"] == [str(dead.id)]
    dead.refresh_from_db()
    assert dead.status == "pending" and dead.attempts == 0
    assert redis_client.llen("nexopoll.deliveries") == 1  # a deliver task is queued


def test_redeliver_refusals(api, jobs):
    sent = row("sent", 1)
    error(api.post(f"/api/deliveries/{sent.id}/redeliver"), 409, "conflict")
    sent.refresh_from_db()
    assert sent.status == "sent"
    r = api.post(f"/api/deliveries/{sent.id}/redeliver", {"force": True})
    assert r.status_code == 200 and r.json()["redelivered"] == [str(sent.id)]
    sent.refresh_from_db()
    assert sent.status == "pending" and sent.attempts == 0
    error(api.post(f"/api/deliveries/{uuid.uuid4()}/redeliver"), 404)
    error(api.post("/api/deliveries/12345/redeliver"), 400)
