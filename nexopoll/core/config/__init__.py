"""Load and validate ``pollers.yaml`` into frozen job specs, once, at load, loudly.

Pure: the caller passes the file text, the environment and ``now``; nothing here
reads files, the clock or ``os.environ``.

Rules chosen where the format leaves room (see also :func:`load_config`):

- An empty file, or a file without a ``pollers:`` key, loads as
  ``enabled=False`` with no jobs (the subsystem is off, as for an absent file).
  ``pollers:`` present but empty means all defaults (``enabled=True``, no jobs).
- ``enabled: false`` loads no jobs (they are not even validated).
- Job ids match :data:`JOB_ID_RE` (lowercase, digits, ``_ . -``; 1-100 chars),
  safe in Redis keys, metric labels and URL path segments. Agent ids use the
  same pattern; channel names match :data:`CHANNEL_RE`.
- A job may name an agent that ``agents:`` does not declare (``log`` and
  ``webhook`` deliveries need no binding); naming a declared agent that has
  errors rejects the job.
- ``schedule.tz`` is only valid with ``cron``; ``every_secs`` is capped at
  :data:`MAX_EVERY_SECS`; jitter at :data:`MAX_JITTER_MS`; ``at`` may be in the
  past (a one-shot that already fired must survive a reload).
- ``failure_to.to`` may be written as an integer (a Telegram chat id) and is
  kept as a string.
- Errors in the ``pollers:`` settings block, in the top-level shape or in the
  YAML itself make the whole file unusable (:class:`ConfigFileError`); errors
  inside one job or one agent are issues that reject only that job / agent.
- In ``agents:`` bindings a secret-named key (see :func:`is_secret_key`) must be
  exactly one ``${VAR}`` reference, nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from ..bindings import BUILTIN_BINDING_SCHEMAS, BindingSchemas
from ..envrefs import env_refs, expand_env, expand_text, is_secret_key, ref_strings
from ..limits import AGENT_ID_RE, CHANNEL_RE, JOB_ID_RE
from ..schedule import MAX_EVERY_SECS
from ..yamlsrc import SourceDoc, YamlSourceError, load_yaml
from .agents import KnownAgents, file_error, load_agents
from .jobs import JobLoader
from .llm import check_llm_section
from .model import (
    MAX_JITTER_MS,
    MAX_JOBS,
    AgentSpec,
    ConfigFileError,
    ConfigIssue,
    DeliverTarget,
    DeliverTargetModel,
    JobSpec,
    LoadedConfig,
    PollersSettings,
    SettingsModel,
    definition_hash,
    fmt_path,
    pydantic_problems,
)

__all__ = [
    "AGENT_ID_RE",
    "CHANNEL_RE",
    "JOB_ID_RE",
    "MAX_EVERY_SECS",
    "MAX_JITTER_MS",
    "MAX_JOBS",
    "AgentSpec",
    "ConfigFileError",
    "ConfigIssue",
    "DeliverTarget",
    "DeliverTargetModel",
    "JobSpec",
    "LoadedConfig",
    "PollersSettings",
    "definition_hash",
    "env_refs",
    "expand_env",
    "expand_text",
    "is_secret_key",
    "load_config",
    "ref_strings",
]


def load_config(
    text: str | bytes,
    *,
    source: str,
    env: Mapping[str, str],
    now: datetime,
    validators: Mapping[str, Callable[[dict[str, Any]], None]],
    channels: BindingSchemas | None = None,
) -> LoadedConfig:
    """Parse and validate a ``pollers.yaml`` text.

    Args:
        text: The file content (at most 64 MiB).
        source: File name used in messages (``config/pollers.yaml``).
        env: Environment used to check and expand ``${VAR}`` references.
        now: Current aware time, used to reject cron expressions that never fire.
        validators: ``kind -> Poller.validate``; each is called with the job's
            config after ``${VAR}`` expansion and rejects the job by raising
            ``ConfigError`` or a pydantic ``ValidationError``.
        channels: The installed channels, ``name -> binding schema`` (None for a
            channel whose binding is a plain mapping of strings). A ``failure_to``
            must name one of them. Without it (pure callers, tests) the built-in
            ``log`` and ``webhook`` schemas are used and ``failure_to`` channels are
            only checked for their spelling.

    Returns:
        Settings, valid jobs (file order) and agents, and the issues that
        rejected individual jobs or agents.

    Raises:
        ConfigFileError: The file as a whole is unusable.
    """
    try:
        doc = load_yaml(text)
    except YamlSourceError as exc:
        raise ConfigFileError([ConfigIssue(source, exc.line, None, "", exc.message)]) from None
    if doc.value is None:
        return LoadedConfig(PollersSettings(enabled=False), {}, {}, [])
    _check_top_level(doc, source)
    check_llm_section(doc, source, env)  # the top-level llm: section (config/llm.py)
    settings, raw_jobs = _load_settings(doc, source)
    schemas = BUILTIN_BINDING_SCHEMAS if channels is None else channels
    agents, bad_agents, issues = load_agents(doc, source, env, schemas)
    if not settings.enabled:
        return LoadedConfig(settings, {}, agents, issues)
    known = KnownAgents(agents, bad_agents, channels)
    loader = JobLoader(doc, source, env, now, validators, settings, known)
    jobs = loader.load(raw_jobs)
    return LoadedConfig(
        settings, jobs, agents, _with_rejects(issues, loader.by_bad_agent) + loader.issues
    )


def _with_rejects(issues: list[ConfigIssue], by_agent: dict[str, list[str]]) -> list[ConfigIssue]:
    """The agents' issues, the first of each naming the jobs it rejects (once)."""
    out = []
    for issue in issues:
        jobs = by_agent.pop(issue.agent_id, None) if issue.agent_id is not None else None
        out.append(issue if not jobs else replace(issue, rejects=tuple(jobs)))
    return out


def _check_top_level(doc: SourceDoc, source: str) -> None:
    root = doc.value
    if not isinstance(root, dict):
        raise file_error(
            doc, source, (), "", "top level must be a mapping with 'pollers:' (and 'agents:')"
        )
    unknown = [key for key in root if key not in ("pollers", "agents", "llm")]
    if unknown:
        raise ConfigFileError(
            [
                ConfigIssue(
                    source,
                    doc.line_of((key,)),
                    None,
                    key,
                    "unknown top-level key (allowed: agents, llm, pollers)",
                )
                for key in unknown
            ]
        )


def _load_settings(doc: SourceDoc, source: str) -> tuple[PollersSettings, list[Any]]:
    if "pollers" not in doc.value:
        return PollersSettings(enabled=False), []
    raw = doc.value["pollers"]
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise file_error(doc, source, ("pollers",), "pollers", "must be a mapping")
    try:
        model = SettingsModel.model_validate(raw)
    except ValidationError as exc:
        allowed = {(): sorted(SettingsModel.model_fields)}
        raise ConfigFileError(
            [
                ConfigIssue(
                    source, doc.line_of(("pollers", *loc)), None, fmt_path("pollers", loc), msg
                )
                for loc, msg in pydantic_problems(exc, allowed)
            ]
        ) from None
    jobs = raw.get("jobs") or []
    if len(jobs) > MAX_JOBS:
        raise file_error(
            doc,
            source,
            ("pollers", "jobs"),
            "pollers.jobs",
            f"too many jobs ({len(jobs)}; at most {MAX_JOBS})",
        )
    settings = PollersSettings(
        enabled=model.enabled,
        default_jitter_ms=model.default_jitter_ms,
        lease_ttl_factor=model.lease_ttl_factor,
        failure_alert_cooldown_secs=model.failure_alert_cooldown_secs,
        breaker_threshold=model.breaker_threshold,
    )
    return settings, jobs
