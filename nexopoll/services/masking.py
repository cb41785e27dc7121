"""The one masking rule of every operator surface: logs, CLI, admin, API and MCP.

A value is masked when it is the value of a ``${VAR}`` or ``${file:…}`` a job's config
or its agent's bindings reference, unless the variable is declared public
(``NEXOPOLL_PUBLIC_VARS``, and always ``NEXOPOLL_DEMO_BASE``: see
:func:`nexopoll.core.redact.public_names`), plus the server's own tokens. The tick
and the outbox store their errors masked by this rule; the surfaces mask again on
the way out (a value stored before a rotation, or by an older version).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from django.conf import settings

from nexopoll.core.redact import redact, secret_values
from nexopoll.models import Agent, PollJob
from nexopoll.runtime.secretenv import secret_env


def secrets_for(jobs: Iterable[Any], *, agents: bool = True) -> frozenset[str]:
    """The values to mask in output about ``jobs`` (``PollJob`` rows): their ``${VAR}``s,
    their agents' ``${VAR}``s (unless ``agents=False``: no query), the server's tokens."""
    jobs = list(jobs)
    bindings = []
    if agents:
        names = {j.agent for j in jobs}
        bindings = list(Agent.objects.filter(agent_id__in=names).values_list("bindings", flat=True))
    found = set(secret_values([[j.config for j in jobs], bindings], secret_env()))
    for own in (settings.NEXOPOLL_API_TOKEN, settings.NEXOPOLL_METRICS_TOKEN, settings.SECRET_KEY):
        if own and len(own) >= 8:
            found.add(own)
    return frozenset(found)


def redact_tree(value: Any, secrets: frozenset[str]) -> Any:
    """``value`` (strings, dicts, lists, dataclasses) with ``secrets`` masked everywhere."""
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {redact_tree(k, secrets): redact_tree(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_tree(v, secrets) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            f.name: redact(v, secrets)
            for f in dataclasses.fields(value)
            if isinstance(v := getattr(value, f.name), str)
        }
        return dataclasses.replace(value, **changes)
    return value


def masked(value: Any, jobs: Iterable[Any], *, agents: bool = True) -> Any:
    """``value`` (output about ``jobs``) with their secrets masked."""
    secrets = secrets_for(jobs, agents=agents)
    return redact_tree(value, secrets) if secrets else value


def masked_for_ids(value: Any, job_ids: Iterable[str]) -> Any:
    ids = {i for i in job_ids if i}
    return masked(value, PollJob.objects.filter(job_id__in=ids)) if ids else value
