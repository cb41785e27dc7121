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
  sorted order: the same series each scrape), a series is skipped as ``over_limit``;
  so is every field of a job past twice its series cap, unread. The writer applies
  the same caps (``metricstore.queue_poller``); this catches what was stored before
  them or under larger ones (the 550,000 series that used to time a scrape out).
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
#: fields of one job the scrape reads, in times its series cap (the rest: over_limit)
EXAMINED_PER_JOB = 2


def as_int(value: object) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def families(
    raw: dict[str, str],
    dropped: dict[str, str],
    kind_of: Callable[[str], str],
    skipped: Counter,
) -> list[Family]:
    """``poller_metric_total`` and ``nexopoll_metric_series_dropped_total``."""
    return [_series(raw, kind_of, skipped), _dropped(dropped, skipped)]


def _series(raw: dict[str, str], kind_of: Callable[[str], str], skipped: Counter) -> Family:
    """In the order of the stored fields (job, then name, then labels), each series checked,
    masked and merged with any it became equal to; past a cap, skipped. A job's fields past
    ``EXAMINED_PER_JOB`` times its series cap are skipped unread (half a million stored
    series of one job cost a sort and a string scan, not half a million JSON checks)."""
    secrets = logredact.known()
    max_values, max_series = ms.limits()
    examine = EXAMINED_PER_JOB * max_series
    clean: dict[str, str] = {}  # value → shown value, for this scrape
    shown: dict[tuple[str, str, metricrules.Labels], int] = {}
    examined: Counter = Counter()
    per_job: Counter = Counter()
    values: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for field in sorted(raw):
        prefix = _job_prefix(field)
        if prefix is not None:
            examined[prefix] += 1
            if examined[prefix] > examine or per_job[prefix] >= max_series:
                skipped["over_limit"] += 1
                continue
        parsed, count = metricrules.parse_stored(field), as_int(raw[field])
        if parsed is None or count is None:
            skipped["invalid"] += 1
            continue
        job_id, name, pairs = parsed
        for _, value in pairs:
            if value not in clean:
                clean[value] = metricrules.clean_value(value, secrets)
        key = (job_id, name, tuple((label, clean[value]) for label, value in pairs))
        if key in shown:  # two stored values that show the same (masked, cut)
            shown[key] += count
            continue
        if per_job[job_id] >= max_series or any(
            v not in values[(job_id, name, k)] and len(values[(job_id, name, k)]) >= max_values
            for k, v in key[2]
        ):
            skipped["over_limit"] += 1
            continue
        per_job[job_id] += 1
        for k, v in key[2]:
            values[(job_id, name, k)].add(v)
        shown[key] = count
    fam = Family("poller_metric", "counter", "Pollers' own counters (host.metric_inc)")
    for (job_id, name, pairs), count in shown.items():
        inner = "".join(f',{k}="{escape(v)}"' for k, v in pairs)
        kind = escape(kind_of(job_id))
        fam.add_raw(f'{{job_id="{escape(job_id)}",kind="{kind}",name="{name}"{inner}}}', count)
    return fam


def _job_prefix(field: str) -> str | None:
    """The job id a field ``["<job_id>",…`` starts with, without parsing it (job ids need
    no JSON escapes); None when it does not look like that."""
    if not field.startswith('["'):
        return None
    end = field.find('"', 2)
    return field[2:end] if end > 2 and "\\" not in field[2:end] else None


def _dropped(raw: dict[str, str], skipped: Counter) -> Family:
    fam = Family(
        "nexopoll_metric_series_dropped",
        "counter",
        "host.metric_inc increments refused because their series would have passed the "
        "job's series cap or a label's values cap (metric=\"*\": a name the job had no "
        "series of yet)",
        ["job_id", "metric"],
    )
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
        "nexopoll_metric_series_skipped",
        "gauge",
        "Stored series this scrape left out: unreadable or against the naming rules "
        "(invalid), or past the cardinality caps (over_limit)",
        ["reason"],
    )
    for reason in SKIP_REASONS:
        fam.add([reason], skipped[reason])
    return fam
