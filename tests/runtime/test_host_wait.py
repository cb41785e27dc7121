"""Waiting on a host cap is visible (issue 19): the time requests waited for a turn on
their host is a histogram by host in /metrics, host labels capped; the job's latest
wait is kept for its admin page."""

from __future__ import annotations

import time

from nexopoll.runtime import hostwait, politeness
from nexopoll.runtime.tick import tick_job
from tests.metrics.test_metrics import get, scrape
from tests.runtime.test_politeness import NOW, Busy, each_in_a_thread, job
from tests.support.httpserver import TestHTTPServer

HOST = "127.0.0.1"


def scheduled(job_id: str) -> str:
    """A scheduled tick as the ``nexopoll.tick`` task runs it (its politeness scope)."""
    with politeness.deferring(job_id):
        return tick_job(job_id, now=NOW).status


def tick_all(ids: list[str]) -> dict[str, str]:
    return each_in_a_thread(ids, scheduled)


def test_ticks_that_wait_for_a_host_turn_are_counted_by_host_and_noted_per_job(cfg, redis_client):
    busy = Busy(0.15)
    with TestHTTPServer() as api:
        api.route("GET", "/feed", busy)
        ids = [f"q{i}" for i in range(4)]
        cfg.write([job(j, api.url("/feed"), host_limits={"in_flight": 1}) for j in ids])
        cfg.reload()
        assert tick_all(ids) == dict.fromkeys(ids, "ok")
    assert busy.peak == 1
    data = scrape()
    waits = get(data, "poller_host_wait_seconds_count", host=HOST)
    assert waits is not None and 3 <= waits <= 4  # one went first; the others waited
    # four requests of 0.15 s one at a time: the waits add up to at least 0.15+0.3+0.45 s
    assert get(data, "poller_host_wait_seconds_sum", host=HOST) >= 0.8
    assert get(data, "poller_host_wait_seconds_bucket", host=HOST, le="+Inf") == waits
    noted = {j: hostwait.last_wait(redis_client, j) for j in ids}
    waited = {j: w for j, w in noted.items() if w is not None}
    assert len(waited) == waits
    for w in waited.values():
        assert w["host"] == HOST and w["cap"] == 1 and w["ms"] >= 50
        assert abs(w["at"] - time.time()) < 30


def test_a_tick_that_never_gets_a_turn_is_counted_too(cfg, redis_client):
    with TestHTTPServer() as api:
        api.route("GET", "/feed", Busy(0.0))
        job_cfg = job("w", api.url("/feed"), host_limits={"in_flight": 1})
        job_cfg["config"]["timeout_secs"] = 1
        cfg.write([job_cfg])
        cfg.reload()
        redis_client.zadd("nexopoll:host:127.0.0.1", {"other-worker": time.time() * 1000 + 60e3})
        assert scheduled("w") == "transient"
    assert get(scrape(), "poller_host_wait_seconds_count", host=HOST) == 1
    assert hostwait.last_wait(redis_client, "w")["ms"] >= 500


def test_no_wait_no_series_and_no_note(cfg, redis_client):
    with TestHTTPServer() as api:
        api.route("GET", "/feed", Busy(0.0))
        cfg.write([job("solo", api.url("/feed"))])
        cfg.reload()
        assert scheduled("solo") == "ok"
    assert not [k for k in scrape() if k[0].startswith("poller_host_wait")]
    assert hostwait.last_wait(redis_client, "solo") is None


def test_host_labels_are_capped(cfg, redis_client, settings):
    settings.NEXOPOLL_METRICS_MAX_LABEL_VALUES = 2
    for host in ("a.test", "b.test", "c.test", "d.test", "a.test"):
        hostwait.record(redis_client, host, 0.02)
    data = scrape()
    counts = {
        h: get(data, "poller_host_wait_seconds_count", host=h)
        for h in ("a.test", "b.test", "c.test", "d.test", hostwait.OTHER)
    }
    assert counts == {"a.test": 2, "b.test": 1, "c.test": None, "d.test": None, hostwait.OTHER: 2}


def test_metrics_off_records_no_wait(cfg, redis_client, settings):
    settings.NEXOPOLL_METRICS = False
    hostwait.record(redis_client, "a.test", 0.5, job_id="x", cap=1)
    assert hostwait.last_wait(redis_client, "x") is None
    assert not redis_client.exists("nexopoll:metrics:host_wait")


def test_turns_ended_in_the_ticks_closing_round_trip(redis_client):
    """Within ``deferring`` (a scheduled tick), a finished request's turn is ended by the
    tick's closing pipeline, not by a round trip of its own; the tick's next request on the
    same host (cap 1) ends it as it takes its own, never waiting on itself; what is left
    when the block ends is ended then."""
    from nexopoll.net.http import _Budget
    from nexopoll.runtime import politeness

    host, key = "paged.example", "nexopoll:host:paged.example"
    other, other_key = "other.example", "nexopoll:host:other.example"
    with politeness.deferring() as pending:
        with politeness.turn(host, _Budget(5, None, "page 1"), in_flight=1, per_sec=0):
            pass
        assert redis_client.zcard(key) == 1 and len(pending) == 1  # still held
        started = time.monotonic()
        with politeness.turn(host, _Budget(2, None, "page 2"), in_flight=1, per_sec=0):
            assert redis_client.zcard(key) == 1  # page 1's turn ended as page 2's was taken
        assert time.monotonic() - started < 1.0  # no wait for its own earlier turn
        pipe = redis_client.pipeline(transaction=False)
        politeness.queue_releases(pipe, pending)
        pipe.execute()
        assert redis_client.zcard(key) == 0 and pending == []
        with politeness.turn(other, _Budget(5, None, "left"), in_flight=1, per_sec=0):
            pass
        assert redis_client.zcard(other_key) == 1
    assert redis_client.zcard(other_key) == 0  # ended when the block ended
    with politeness.turn(host, _Budget(5, None, "outside"), in_flight=1, per_sec=0):
        pass
    assert redis_client.zcard(key) == 0  # outside a tick: ended at once


def test_the_tick_task_notes_its_job_and_ends_its_turn_with_the_lease(cfg, redis_client):
    from nexopoll import tasks

    with TestHTTPServer() as api:
        api.route("GET", "/feed", Busy(0.0))
        cfg.write([job("t", api.url("/feed"), host_limits={"in_flight": 1})])
        cfg.reload()
        # another worker's turn that ends in 0.3 s (Redis's clock): the tick waits for it
        now_ms = int(redis_client.time()[0]) * 1000 + redis_client.time()[1] // 1000
        redis_client.zadd("nexopoll:host:127.0.0.1", {"other-worker": now_ms + 300})
        assert tasks.tick.apply(args=["t"]).get() == "ok"
    assert hostwait.last_wait(redis_client, "t")["cap"] == 1
    assert redis_client.zcard("nexopoll:host:127.0.0.1") == 0  # its own turn ended too
