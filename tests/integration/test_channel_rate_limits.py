"""Provider rate limits hold across worker processes: two real Celery workers send
Telegram messages to a local Bot API server, which counts the sends per second."""

from __future__ import annotations

import bisect
import itertools

import pytest
import yaml
from django.utils import timezone

from nexopoll.models import Delivery
from nexopoll.runtime.tick import tick_job
from tests.support.apibases import point_api
from tests.support.httpserver import TestHTTPServer, json_reply
from tests.support.procs import wait_for

from .conftest import job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TOKEN = "555:RATE-CANARY"


def most_in_one_second(times: list[float]) -> int:
    """The most requests that arrived within any window of 1 s."""
    times = sorted(times)
    return max(bisect.bisect_left(times, t + 1.0) - i for i, t in enumerate(times))


def run(stack, monkeypatch, binding: dict, jobs: list[dict], items: int) -> TestHTTPServer:
    server = TestHTTPServer().start()
    server.route("POST", f"/bot{TOKEN}/sendMessage", json_reply({"ok": True, "result": {}}))
    point_api(monkeypatch, "telegram", server.base_url)
    monkeypatch.setenv("TG_TOKEN", TOKEN)
    doc = {
        "pollers": {"default_jitter_ms": 0, "jobs": jobs},
        "agents": {"ana": {"telegram": {"account": "ana_bot", "token": "${TG_TOKEN}", **binding}}},
    }
    stack.config.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert stack.reload().issues == []
    stack.worker("w1")
    stack.worker("w2")
    ids: list[str] = []
    for spec in jobs:
        stack.publish(spec["id"], *range(1, items + 1))
        ids += tick_job(spec["id"], now=timezone.now()).delivery_ids  # queued at commit

    def all_sent() -> bool:
        return Delivery.objects.filter(id__in=ids, status="sent").count() == len(ids)

    wait_for(all_sent, 60, what="every row sent")
    assert server.hits() == len(ids)  # each once
    assert set(Delivery.objects.filter(id__in=ids).values_list("attempts", flat=True)) == {1}
    return server


def test_one_chat_gets_at_most_one_message_per_second_across_two_workers(stack, monkeypatch):
    spec = job("tg", every=3600, config={"deliver": {"channel": "telegram", "to": "42"}})
    server = run(stack, monkeypatch, {}, [spec], items=6)
    try:
        times = sorted(r.at for r in server.requests)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        print(f"per-chat gaps: {[round(g, 3) for g in gaps]}")
        # 1 s apart by Redis's clock; the arrival times jitter by a few ms
        assert min(gaps) >= 0.9 and len(times) == 6
    finally:
        server.stop()


def test_one_bot_stays_under_its_rate_across_chats_and_workers(stack, monkeypatch):
    jobs = [
        job(f"c{i}", every=3600, config={"deliver": {"channel": "telegram", "to": str(i)}})
        for i in range(4)
    ]
    server = run(
        stack, monkeypatch, {"max_per_second": 5, "max_per_chat_per_second": 100}, jobs, items=5
    )
    try:
        times = [r.at for r in server.requests]
        peak = most_in_one_second(times)
        print(f"bot: {len(times)} sends in {max(times) - min(times):.2f} s, peak {peak}/s")
        assert peak <= 5 + 1  # a window may catch both ends of a 1 s span
        assert max(times) - min(times) >= (len(times) - 1) / 5 * 0.9
    finally:
        server.stop()
