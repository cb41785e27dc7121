"""What a poller's own metric (``host.metric_inc``) may be called and labelled (pure).

A ``metric_inc(name, **labels)`` call becomes one series of
``poller_metric_total{job_id, kind, name, <labels>}``. The runtime sets ``job_id``,
``kind`` and ``name``; Prometheus itself reserves ``__``-prefixed names, ``le`` and
``quantile`` have a meaning of their own, and ``job``/``instance``/``agent`` are labels
Prometheus or the runtime attach elsewhere. One label that shadows any of them (or is no
label name at all: ``1abc``, ``a-b``, ``é``, empty) would make the whole scrape unreadable,
so such a call is refused where it is made:

- the name matches :data:`METRIC_NAME_RE`, label names :data:`LABEL_NAME_RE`, each at
  most :data:`MAX_NAME_CHARS` characters, none in :data:`RESERVED_LABELS` or ``__``-prefixed;
- at most :data:`MAX_LABELS` labels.

Refusals are :class:`ConfigError` (a poller that builds a label name from what it polled
has a bug to fix). Values are never refused: they are any text, cut to
:data:`MAX_VALUE_CHARS` characters, with ``${VAR}`` secrets masked (``redact``) and the
characters UTF-8 cannot carry (lone surrogates) replaced; the exposition escapes ``\\``,
``"`` and newlines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import ConfigError
from .redact import redact

METRIC_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*", re.ASCII)
LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*", re.ASCII)
RESERVED_LABELS = frozenset(
    {"job_id", "kind", "name", "agent", "job", "instance", "le", "quantile"}
)
MAX_NAME_CHARS = 100
MAX_LABELS = 5
MAX_VALUE_CHARS = 100

Labels = tuple[tuple[str, str], ...]


def check_name(name: object) -> str:
    """``name`` if it is a valid metric name; ConfigError saying why not."""
    if not isinstance(name, str) or not METRIC_NAME_RE.fullmatch(name):
        raise ConfigError(
            f"metric_inc: invalid metric name {_show(name)} (must match {METRIC_NAME_RE.pattern})"
        )
    if len(name) > MAX_NAME_CHARS:
        raise ConfigError(f"metric_inc: metric name longer than {MAX_NAME_CHARS} characters")
    return name


def label_problem(label: object) -> str | None:
    """Why ``label`` cannot be a label name of a poller's metric (None: it can)."""
    if not isinstance(label, str) or not LABEL_NAME_RE.fullmatch(label):
        return f"must match {LABEL_NAME_RE.pattern}"
    if len(label) > MAX_NAME_CHARS:
        return f"longer than {MAX_NAME_CHARS} characters"
    if label.startswith("__"):
        return "names starting with __ are reserved to Prometheus"
    if label in RESERVED_LABELS:
        return f"reserved: the runtime or Prometheus sets it ({', '.join(sorted(RESERVED_LABELS))})"
    return None


def clean_value(value: object, secrets: Iterable[str] = ()) -> str:
    """A label value as it may be stored and shown: text, secrets masked, cut, UTF-8 safe."""
    text = value if isinstance(value, str) else str(value)
    text = redact(text[: MAX_VALUE_CHARS * 4], secrets)[:MAX_VALUE_CHARS]
    return text.encode("utf-8", "replace").decode("utf-8")


def series(
    name: object, labels: Mapping[Any, Any], secrets: Iterable[str] = ()
) -> tuple[str, Labels]:
    """A ``metric_inc(name, **labels)`` call as ``(name, sorted (label, value) pairs)``.

    Raises:
        ConfigError: a bad metric or label name, or more than ``MAX_LABELS`` labels; the
            message names the metric and the label.
    """
    name = check_name(name)
    if len(labels) > MAX_LABELS:
        raise ConfigError(
            f"metric_inc({name!r}): {len(labels)} labels, at most {MAX_LABELS} allowed"
        )
    for label in labels:
        problem = label_problem(label)
        if problem is not None:
            raise ConfigError(f"metric_inc({name!r}): invalid label name {_show(label)}: {problem}")
    secrets = secrets if isinstance(secrets, frozenset) else frozenset(secrets)
    return name, tuple(sorted((k, clean_value(v, secrets)) for k, v in labels.items()))


def parse_stored(field: str) -> tuple[str, str, Labels] | None:
    """A stored series field ``[job_id, name, [[label, value], …]]`` read back, or None when
    it is not one a current ``metric_inc`` could have written (an older version's, a
    hand-written one): the scrape skips it rather than fail."""
    try:
        job_id, name, pairs = json.loads(field)
        if not isinstance(job_id, str) or not isinstance(pairs, list) or len(pairs) > MAX_LABELS:
            return None
        check_name(name)
        labels = dict(pairs)
        if len(labels) != len(pairs):  # a label twice
            return None
        for label, value in labels.items():
            if label_problem(label) is not None or not isinstance(value, str):
                return None
    except (ValueError, TypeError, ConfigError):
        return None
    return job_id, name, tuple(sorted(labels.items()))


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
