"""``host.metric_inc``: bad names refused at the call, values masked, cut and escaped.

A label named ``__name__`` (or ``le``, ``job``, ``1abc``…) used to reach Redis and then
every scrape, which no Prometheus could read. Now the call raises ConfigError naming
the job, the metric and the label; an in-process poller that does not catch it fails
its tick as a config error, a plugin gets the error as its reverse call's reply (or, for
a notification, the refusal is logged). Values are never refused.
"""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from nexopoll.core.errors import ConfigError
from nexopoll.models import PollState
from nexopoll.runtime.host import TickHost
from nexopoll.runtime.tick import tick_job
from tests.runtime.conftest import scripted

from .test_metrics import cfg, get, samples, scrape  # noqa: F401 (fixture)

FULLWIDTH = "\uff4c\uff41\uff42\uff45\uff4c"  # "label" in fullwidth letters
BAD_LABELS = [
    "__name__",
    "__meta",
    "le",
    "quantile",
    "job",
    "instance",
    "job_id",
    "kind",
    "name",
    "agent",
    "1abc",
    "a-b",
    "a.b",
    "a b",
    "é",
    FULLWIDTH,
    "",
    "a\n",
    "x" * 101,
]
BAD_NAMES = ["", "1abc", "a-b", "a b", "é", "m\n", "m{x}", "x" * 101, 7, None]


def host() -> TickHost:
    return TickHost("j1", "ana", {}, {})


@pytest.mark.parametrize("label", BAD_LABELS)
def test_a_bad_label_name_is_refused_at_the_call(label):
    h = host()
    with pytest.raises(ConfigError) as info:
        h.metric_inc("pages", **{label: "v"})
    text = str(info.value)
    assert "job 'j1'" in text and "'pages'" in text and repr(label)[:30] in text
    assert h.metric_counts == {}


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_bad_metric_name_is_refused_at_the_call(name):
    h = host()
    with pytest.raises(ConfigError, match="metric name"):
        h.metric_inc(name, source="x")
    assert h.metric_counts == {}


def test_more_than_five_labels_are_refused():
    with pytest.raises(ConfigError, match="6 labels, at most 5"):
        host().metric_inc("m", **{f"l{i}": "v" for i in range(6)})


def test_good_names_pass_and_values_are_never_refused():
    h = host()
    h.metric_inc("pages_fetched:total", status="404", _private="x", Source="rss", n=3)
    h.metric_inc("m", v="x" * 10_000)
    h.metric_inc("m", v="a\ud800b")  # a lone surrogate, which UTF-8 cannot carry
    assert (
        "pages_fetched:total",
        (("Source", "rss"), ("_private", "x"), ("n", "3"), ("status", "404")),
    ) in h.metric_counts
    assert ("m", (("v", "x" * 100),)) in h.metric_counts
    assert ("m", (("v", "a?b"),)) in h.metric_counts


def test_a_refused_label_fails_the_tick_as_a_config_error_and_the_scrape_stays_readable(
    cfg,  # noqa: F811
    redis_client,
):
    cfg.write([scripted("m")])
    cfg.reload()
    calls = [
        {"name": "ok_total", "labels": {"source": "a"}},
        {"name": "bad", "labels": {"__name__": "evil"}},
    ]
    redis_client.rpush("test:metric:m", *map(json.dumps, calls))
    report = tick_job("m", now=timezone.now())
    assert report.status == "permanent"  # a config error: the job is paused
    assert "'__name__'" in report.error and "job 'm'" in report.error
    assert PollState.objects.get(job_id="m").paused
    response = scrape_text()
    assert "__name__" not in response and "evil" not in response
    samples(response)  # Prometheus' own parser reads it


def test_values_with_newlines_quotes_backslashes_and_unicode_are_escaped(
    cfg,  # noqa: F811
    redis_client,
):
    cfg.write([scripted("v")])
    cfg.reload()
    values = {
        "nl": "a\nb",
        "q": 'say "hi"',
        "bs": "C:\\dir\\",
        "uni": "ünï 🚀 中文",
        "long": "y" * 5000,
    }
    redis_client.rpush(
        "test:metric:v", *(json.dumps({"name": "m", "labels": {k: v}}) for k, v in values.items())
    )
    assert tick_job("v", now=timezone.now()).status == "ok"
    text = scrape_text()
    assert 'nl="a\\nb"' in text and 'q="say \\"hi\\""' in text and 'bs="C:\\\\dir\\\\"' in text
    data = samples(text)
    for k, v in values.items():
        assert (
            get(data, "poller_metric_total", job_id="v", kind="scripted", name="m", **{k: v[:100]})
            == 1
        )


def scrape_text() -> str:
    from django.test import Client

    response = Client().get("/metrics")
    assert response.status_code == 200
    return response.content.decode()
