"""Per-host politeness (issue 6): the requests in flight to one host and the requests
per second to it are capped across every worker through Redis, with defaults and a
per-job ``host_limits`` override; a tick that waits for its turn is not an error."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from django.db import connection

from nexopoll.core.config import ConfigFileError
from nexopoll.models import PollState
from nexopoll.runtime.tick import tick_job
from tests.support.httpserver import TestHTTPServer, json_reply
from tests.support.procs import wait_for

NOW = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)


class Busy:
    """Counts requests in flight at once and their arrival second."""

    def __init__(self, delay: float) -> None:
        self.delay, self.lock = delay, threading.Lock()
        self.now = self.peak = 0
        self.seconds: Counter[int] = Counter()

    def __call__(self, req):
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.seconds[int(time.time())] += 1
        try:
            time.sleep(self.delay)
        finally:
            with self.lock:
                self.now -= 1
        return json_reply([])(req)


def job(job_id: str, url: str, **extra) -> dict:
    return {
        "id": job_id,
        "kind": "webhook_poll",
        "agent": "ana",
        "schedule": {"every_secs": 60},
        "config": {
            "url": url,
            "items_path": "",
            "deliver": {"channel": "log", "to": "ops"},
            "allow_private_networks": True,
        },
        **extra,
    }


def each_in_a_thread(ids: list[str], tick: Callable[[str], str]) -> dict[str, str]:
    """``tick`` every job at once, each in its own thread (as a threads worker does)."""
    out: dict[str, str] = {}

    def one(job_id: str) -> None:
        try:
            out[job_id] = tick(job_id)
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(j,)) for j in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def tick_all(ids: list[str]) -> dict[str, str]:
    return each_in_a_thread(ids, lambda job_id: tick_job(job_id, now=NOW).status)


def test_a_jobs_host_limits_cap_requests_in_flight_and_waiting_is_not_an_error(cfg):
    busy = Busy(0.15)
    with TestHTTPServer() as api:
        api.route("GET", "/feed", busy)
        ids = [f"h{i}" for i in range(12)]
        cfg.write([job(j, api.url("/feed"), host_limits={"in_flight": 3}) for j in ids])
        cfg.reload()
        started = time.monotonic()
        statuses = tick_all(ids)
    assert statuses == dict.fromkeys(ids, "ok")  # every tick waited its turn, none failed
    assert busy.peak == 3  # twelve ticks at once, never more than three requests
    assert time.monotonic() - started >= 4 * 0.15
    assert all(s.last_status == "ok" for s in PollState.objects.all())


def test_a_per_second_cap_spreads_requests_over_seconds(cfg):
    busy = Busy(0.0)
    with TestHTTPServer() as api:
        api.route("GET", "/feed", busy)
        ids = [f"r{i}" for i in range(10)]
        limits = {"in_flight": 0, "per_sec": 4}
        cfg.write([job(j, api.url("/feed"), host_limits=dict(limits)) for j in ids])
        cfg.reload()
        statuses = tick_all(ids)
    assert statuses == dict.fromkeys(ids, "ok")
    assert sum(busy.seconds.values()) == 10
    assert max(busy.seconds.values()) <= 4 and len(busy.seconds) >= 3


def test_the_default_cap_applies_to_jobs_without_an_override(cfg, settings):
    settings.NEXOPOLL_HOST_MAX_IN_FLIGHT = 2
    busy = Busy(0.15)
    with TestHTTPServer() as api:
        api.route("GET", "/feed", busy)
        ids = [f"d{i}" for i in range(8)]
        cfg.write([job(j, api.url("/feed")) for j in ids])
        cfg.reload()
        assert tick_all(ids) == dict.fromkeys(ids, "ok")
    assert busy.peak == 2


def test_a_tick_whose_deadline_passes_while_waiting_is_transient(cfg, redis_client):
    busy = Busy(0.0)
    with TestHTTPServer() as api:
        api.route("GET", "/feed", busy)
        job_cfg = job("w", api.url("/feed"), host_limits={"in_flight": 1})
        job_cfg["config"]["timeout_secs"] = 1
        cfg.write([job_cfg])
        cfg.reload()
        # another worker holds the host's only turn for a long time
        redis_client.zadd("nexopoll:host:127.0.0.1", {"other-worker": time.time() * 1000 + 60e3})
        report = tick_job("w", now=NOW)
    assert report.status == "transient" and "deadline" in report.error
    assert busy.seconds.total() == 0  # never sent while the host was busy


@pytest.mark.parametrize(
    "limits, message",
    [({"in_flight": -1}, "greater than or equal to 0"), ({"burst": 3}, "unknown field")],
)
def test_bad_host_limits_reject_the_job(cfg, limits, message):
    cfg.write([job("bad", "http://127.0.0.1:1/", host_limits=limits)])
    try:
        result = cfg.reload()
    except ConfigFileError as exc:
        text = str(exc)
    else:
        text = " ".join(str(i) for i in result.issues)
    assert "host_limits" in text and message in text


def test_a_short_budget_never_cuts_the_turns_of_long_running_requests(redis_client):
    """Cap 2: a request with a 30 s budget holds a turn; one with a 1 s budget (a 2 s
    lease) comes and goes. The holders' set must outlive the short lease, or the long
    request's turn vanishes with it and two more requests get in (3 in flight)."""
    from nexopoll.net.http import DeadlineExceededError, _Budget
    from nexopoll.runtime import politeness

    host, key = "mixed.example", "nexopoll:host:mixed.example"
    with politeness.turn(host, _Budget(30, None, "long"), in_flight=2, per_sec=0):
        with politeness.turn(host, _Budget(1, None, "short"), in_flight=2, per_sec=0):
            pass
        assert redis_client.pttl(key) > 25_000, "a short lease shortened the holders' set"
        # past the short lease (Redis' clock): the long request still holds its turn
        start = redis_client.time()[0]
        wait_for(lambda: redis_client.time()[0] >= start + 3, 10, what="the short lease over")
        assert redis_client.zcard(key) == 1
        with politeness.turn(host, _Budget(1, None, "second"), in_flight=2, per_sec=0):
            with pytest.raises(DeadlineExceededError):  # a third would exceed the cap
                with politeness.turn(host, _Budget(0.3, None, "third"), in_flight=2, per_sec=0):
                    pass
    assert redis_client.zcard(key) == 0
