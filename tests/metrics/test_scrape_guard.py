"""/metrics never fails because of what Redis holds, and never shows a secret.

Fields are written straight into the real Redis the way an older version (or a hand,
or another program) could have left them; the scrape must answer 200 with text
Prometheus' own parser reads, keep every good series, and count what it skipped.
"""

from __future__ import annotations

import json
from urllib.parse import quote

from django.test import Client
from django.utils import timezone

from nexopoll.runtime import metricstore as ms
from nexopoll.runtime.tick import tick_job
from tests.runtime.conftest import scripted

from .test_metrics import cfg, get, samples  # noqa: F401 (fixture)

SECRET = "hk_live_5up3r-s3cr3t-v4lue"


def scrape_text() -> str:
    response = Client().get("/metrics")
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


def test_bad_stored_series_are_skipped_and_counted(cfg, redis_client):  # noqa: F811
    cfg.write([scripted("j")])
    cfg.reload()
    good = ms.poller_field("j", "pages", [("source", "rss")])
    bad_poller = [
        "not json",
        "[]",
        '["j", "m"]',
        '{"a": 1}',
        json.dumps(["j", "m", [["__name__", "evil"]]]),
        json.dumps(["j", "m", [["le", "1"]]]),
        json.dumps(["j", "m", [["job", "x"]]]),
        json.dumps(["j", "1abc", []]),
        json.dumps(["j", "m", [["a-b", "x"]]]),
        json.dumps(["j", "m", [["é", "x"]]]),
        json.dumps(["j", "m", [["a", "x"], ["a", "y"]]]),
        json.dumps(["j", "m", [[f"l{i}", "v"] for i in range(9)]]),
        json.dumps(["j", "m", [["a", 5]]]),
        json.dumps([5, "m", []]),
    ]
    redis_client.hset(ms.POLLER, mapping={good: 3, **{f: 1 for f in bad_poller}})
    redis_client.hset(ms.POLLER, ms.poller_field("j", "counted", [("a", "b")]), "NaN-ish")
    redis_client.hset(ms.POLLER, b'["j","bytes",[["a","\xff\xfe"]]]', 1)  # not UTF-8
    redis_client.hset(ms.TICKS, mapping={f"j{ms.SEP}ok": 2, f"j{ms.SEP}transient": "x"})
    redis_client.hset(
        ms.LATENCY,
        mapping={f"j{ms.SEP}0": 1, f"j{ms.SEP}zz": 1, f"j{ms.SEP}99": 1, f"j{ms.SEP}sum": 5},
    )
    redis_client.hset(ms.SEEN, "j", "lots")
    redis_client.hset(ms.BEAT_LAG, mapping={"0": 1, "huh": 2})
    redis_client.hset(ms.POLLER_DROPPED, mapping={'["j","m"]': 4, "garbage": 1})

    data = samples(scrape_text())
    assert (
        get(data, "poller_metric_total", job_id="j", kind="scripted", name="pages", source="rss")
        == 3
    )
    assert (
        get(
            data, "poller_metric_total", job_id="j", kind="scripted", name="bytes", a="\ufffd\ufffd"
        )
        == 1
    )
    assert (
        get(data, "poller_ticks_total", kind="scripted", agent="ana", job_id="j", status="ok") == 2
    )
    assert get(data, "poller_latency_ms_count", kind="scripted", job_id="j") == 1
    assert get(data, "poller_beat_dispatch_lag_seconds_count") == 1
    assert get(data, "nexopoll_metric_series_dropped_total", job_id="j", metric="m") == 4
    assert get(data, "poller_metrics_store_up") == 1
    names = {labels for (sample, labels) in data if sample == "poller_metric_total"}
    assert len(names) == 2
    # the bad poller fields, the non-integer count, ticks' "x", latency's zz and 99,
    # seen's "lots", beat lag's "huh", the dropped hash's garbage
    skipped = len(bad_poller) + 1 + 1 + 2 + 1 + 1 + 1
    assert get(data, "nexopoll_metric_series_skipped", reason="invalid") == skipped


def test_a_secret_in_a_label_value_is_masked_in_redis_and_on_metrics(
    cfg,  # noqa: F811
    redis_client,
    monkeypatch,
):
    monkeypatch.setenv("API_KEY", SECRET)
    cfg.write(
        [scripted("s", config={"deliver": {"channel": "log", "to": "ops"}, "key": "${API_KEY}"})]
    )
    cfg.reload()
    labels = [
        {"url": f"https://api.example.com/v1?key={SECRET}"},
        {"key": SECRET},
        {"key": SECRET.upper()},
        {"enc": quote(f"k={SECRET}", safe="")},
    ]
    redis_client.rpush(
        "test:metric:s", *(json.dumps({"name": "calls", "labels": lab}) for lab in labels)
    )
    assert tick_job("s", now=timezone.now()).status == "ok"
    stored = json.dumps(redis_client.hgetall(ms.POLLER))
    assert SECRET[:8] not in stored and SECRET.upper()[:8] not in stored
    text = scrape_text()
    assert "hk_live_" not in text.lower()
    data = samples(text)
    assert (
        get(
            data,
            "poller_metric_total",
            job_id="s",
            kind="scripted",
            name="calls",
            url="https://api.example.com/v1?key=***",
        )
        == 1
    )
    # the two spellings of the secret mask to the same value: one series, summed
    assert (
        get(data, "poller_metric_total", job_id="s", kind="scripted", name="calls", key="***") == 2
    )


def test_a_secret_stored_before_masking_existed_is_masked_by_the_scrape(
    cfg,  # noqa: F811
    redis_client,
    monkeypatch,
):
    monkeypatch.setenv("HOOK_URL", f"https://hooks.example.com/{SECRET}")
    cfg.write([scripted("old")], agents={"ana": {"log": {}, "webhook": {"url": "${HOOK_URL}"}}})
    cfg.reload()
    from nexopoll.runtime import logredact

    logredact.reset()  # a fresh web process: it learns the secrets from the DB
    redis_client.hset(ms.POLLER, ms.poller_field("old", "posts", [("to", f"/{SECRET}")]), 5)
    text = scrape_text()
    assert SECRET[:8] not in text
    assert (
        get(
            samples(text),
            "poller_metric_total",
            job_id="old",
            kind="scripted",
            name="posts",
            to="***",
        )
        == 5
    )
