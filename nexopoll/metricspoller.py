"""``/metrics``: the pollers' own series (``host.metric_inc``), read back defensively.

What Redis holds was written by this version, an older one, or by hand; one bad field
must cost its own series, never the scrape. Each stored series is

- parsed and checked against today's rules (``nexopoll.core.metricrules``): a field
  that is not JSON, names a bad metric or label (``__name__``, ``le``, ``a-b``…) or
  carries a count that is no integer is skipped and counted as ``invalid``;
- masked: its label values pass through the log redactor with every ``${VAR}`` secret
  of every stored job and agent (a series written before masking existed, or before
  its secret was configured, shows ``***``), cut to 100 characters, UTF-8 safe; series
  that become the same (two masked values) are summed, never shown twice;
- capped: beyond ``NEXOPOLL_METRICS_MAX_SERIES_PER_JOB`` series per job, or
  ``NEXOPOLL_METRICS_MAX_LABEL_VALUES`` values of one label per job and metric (in
  sorted order: the same series each scrape), a series is skipped as ``over_limit``.
  The writer applies the same caps (``metricstore.queue_poller``); this catches what
  was stored before them or under larger ones.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable

from .core import metricrules
from .metricstext import Family, escape
from .runtime import logredact
from .runtime import metricstore as ms

SKIP_REASONS = ("invalid", "over_limit")


def as_int(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


def families(
    raw: dict[str, str], dropped: dict[str, str], kind_of: Callable[[str], str],
    skipped: Counter,
) -> list[Family]:  # fmt: skip
    """``poller_metric_total`` and ``nexopoll_metric_series_dropped_total``."""
    return [_series(raw, kind_of, skipped), _dropped(dropped, skipped)]


def _series(raw: dict[str, str], kind_of: Callable[[str], str], skipped: Counter) -> Family:
    secrets = logredact.known()
    clean: dict[str, str] = {}  # value → shown value, for this scrape
    merged: dict[tuple[str, str, metricrules.Labels], int] = defaultdict(int)
    for field, n in raw.items():
        parsed, count = metricrules.parse_stored(field), as_int(n)
        if parsed is None or count is None:
            skipped["invalid"] += 1
            continue
        job_id, name, pairs = parsed
        shown = []
        for label, value in pairs:
            if value not in clean:
                clean[value] = metricrules.clean_value(value, secrets)
            shown.append((label, clean[value]))
        merged[(job_id, name, tuple(shown))] += count
    fam = Family("poller_metric", "counter", "Pollers' own counters (host.metric_inc)")
    max_values, max_series = ms.limits()
    per_job: Counter = Counter()
    seen: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for (job_id, name, pairs), count in sorted(merged.items()):
        over = per_job[job_id] >= max_series or any(
            v not in seen[(job_id, name, k)] and len(seen[(job_id, name, k)]) >= max_values
            for k, v in pairs
        )
        if over:
            skipped["over_limit"] += 1
            continue
        per_job[job_id] += 1
        for k, v in pairs:
            seen[(job_id, name, k)].add(v)
        inner = "".join(f',{k}="{escape(v)}"' for k, v in pairs)
        kind = escape(kind_of(job_id))
        fam.add_raw(f'{{job_id="{escape(job_id)}",kind="{kind}",name="{name}"{inner}}}', count)
    return fam


def _dropped(raw: dict[str, str], skipped: Counter) -> Family:
    fam = Family(
        "nexopoll_metric_series_dropped", "counter",
        "host.metric_inc increments refused because their series would have passed the "
        "job's series cap or a label's values cap (metric=\"*\": a name the job had no "
        "series of yet)", ["job_id", "metric"],
    )  # fmt: skip
    for field, n in sorted(raw.items()):
        try:
            job_id, metric = json.loads(field)
        except (TypeError, ValueError):
            job_id = metric = None
        count = as_int(n)
        if not isinstance(job_id, str) or not isinstance(metric, str) or count is None:
            skipped["invalid"] += 1
            continue
        fam.add([job_id, metric[: metricrules.MAX_NAME_CHARS]], count)
    return fam


def skipped_family(skipped: Counter) -> Family:
    fam = Family(
        "nexopoll_metric_series_skipped", "gauge",
        "Stored series this scrape left out: unreadable or against the naming rules "
        "(invalid), or past the cardinality caps (over_limit)", ["reason"],
    )  # fmt: skip
    for reason in SKIP_REASONS:
        fam.add([reason], skipped[reason])
    return fam
