"""The ``pollers.jobs`` list: each job validated alone (pure).

A bad job becomes issues that reject it, never its siblings. Each issue names
the job, the field path and the line it was written on.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from ..bindings import requires_binding
from ..envrefs import expand_env, ref_strings
from ..errors import ConfigError
from ..limits import AGENT_ID_RE, JOB_ID_RE, is_name, must_match
from ..redact import redact, secret_values
from ..schedule import Schedule, ScheduleError, schedule_from_dict
from ..yamlsrc import Path, SourceDoc
from .agents import KnownAgents, env_problems
from .model import (
    JOB_FIELDS,
    MAX_JITTER_MS,
    ConfigIssue,
    DeliverTarget,
    JobModel,
    JobSpec,
    PollersSettings,
    definition_hash,
    fmt_path,
    pydantic_problems,
    split_path,
)
from .values import plain_secret_problems, stored_value_problems


class JobLoader:
    """Validates jobs one by one; a bad job becomes issues and never stops its siblings."""

    def __init__(
        self,
        doc: SourceDoc,
        source: str,
        env: Mapping[str, str],
        now: datetime,
        validators: Mapping[str, Callable[[dict[str, Any]], None]],
        settings: PollersSettings,
        known: KnownAgents,
    ) -> None:
        self.doc, self.source, self.env, self.now = doc, source, env, now
        self.validators, self.settings, self.known = validators, settings, known
        self.known_kinds = ", ".join(sorted(validators)) or "(none)"
        self.issues: list[ConfigIssue] = []
        self.first_line: dict[str, int | None] = {}
        # jobs rejected only because their agent is invalid: the agent's issue says so once
        self.by_bad_agent: dict[str, list[str]] = {}

    def load(self, raw_jobs: list[Any]) -> dict[str, JobSpec]:
        jobs: dict[str, JobSpec] = {}
        for index, item in enumerate(raw_jobs):
            spec = self._job(index, item)
            if spec is not None:
                jobs[spec.id] = spec
        return jobs

    def _job(self, index: int, item: Any) -> JobSpec | None:
        base: Path = ("pollers", "jobs", index)
        raw_id = item.get("id") if isinstance(item, dict) else None
        job_id = raw_id if is_name(JOB_ID_RE, raw_id) else None
        label = f"jobs[{job_id or index}]"
        problems: list[tuple[Path, str]] = []
        secrets: set[str] = set()
        spec = None
        if isinstance(item, dict):
            spec = self._check(index, item, job_id, problems, secrets)
        else:
            problems.append(((), "each job must be a mapping"))
        for rel, message in problems:
            message = redact(message, secrets)
            self.issues.append(
                ConfigIssue(
                    self.source,
                    self.doc.line_of((*base, *rel)),
                    job_id,
                    fmt_path(label, rel),
                    message,
                )
            )
        return None if problems else spec

    def _check(
        self,
        index: int,
        item: dict[str, Any],
        job_id: str | None,
        problems: list[tuple[Path, str]],
        secrets: set[str],
    ) -> JobSpec | None:
        self._check_duplicate(index, job_id, problems)
        try:
            model = JobModel.model_validate(item)
        except ValidationError as exc:
            problems.extend(pydantic_problems(exc, JOB_FIELDS))
            return None
        if job_id is None:
            problems.append((("id",), must_match("job id", JOB_ID_RE)))
        unstorable = list(stored_value_problems(item.get("config"), ("config",)))
        problems.extend(unstorable)
        problems.extend(plain_secret_problems(item.get("config"), ("config",)))
        bad_agent = model.agent in self.known.bad
        if bad_agent and job_id is not None:
            self.by_bad_agent.setdefault(model.agent, []).append(job_id)
        self._check_names(model, problems, item.get("config"))
        outside = {k: v for k, v in item.items() if k != "config"}
        for rel, _ in ref_strings(outside, (), []):
            message = "${...} references are only allowed inside config: and agents: bindings"
            problems.append((rel, message))
        schedule, stagger = self._schedule(model.schedule, problems)
        raw_config: dict[str, Any] = item.get("config") or {}
        config = self._expanded_config(raw_config, problems, secrets)
        if model.kind not in self.validators:
            problems.append((("kind",), self._unknown_kind(model.kind)))
        elif config is not None and not unstorable:
            self._validate(model.kind, config, problems)
        if problems or schedule is None or job_id is None or bad_agent:
            return None
        jitter = self.settings.default_jitter_ms if stagger is None else stagger
        return self._spec(job_id, model, schedule, jitter, raw_config, index)

    def _check_duplicate(
        self, index: int, job_id: str | None, problems: list[tuple[Path, str]]
    ) -> None:
        if job_id is None:
            return
        if job_id in self.first_line:
            first = self.first_line[job_id]
            message = f"duplicate job id {job_id!r} (first defined at line {first})"
            problems.append((("id",), message))
        else:
            self.first_line[job_id] = self.doc.line_of(("pollers", "jobs", index, "id"))

    def _check_names(self, model: JobModel, problems: list[tuple[Path, str]], config: Any) -> None:
        agent = model.agent
        if not is_name(AGENT_ID_RE, agent):
            problems.append((("agent",), must_match("agent id", AGENT_ID_RE)))
            return
        if agent in self.known.bad:  # rejected by the agent's own issue (see load_config)
            return
        if model.failure_to is not None:
            message = self._binding_problem(agent, model.failure_to.channel, "alerts")
            if message:
                problems.append((("failure_to", "channel"), message))
        # a kind's delivery target: by convention ``config.deliver: {channel, to}``
        deliver = config.get("deliver") if isinstance(config, dict) else None
        channel = deliver.get("channel") if isinstance(deliver, dict) else None
        if isinstance(channel, str) and "${" not in channel:
            message = self._binding_problem(agent, channel, "deliveries")
            if message:
                problems.append((("config", "deliver", "channel"), message))

    def _binding_problem(self, agent: str, channel: str, what: str) -> str | None:
        """Why ``what`` (alerts, deliveries) of ``agent``'s job could not go out on
        ``channel``, if they could not."""
        installed = self.known.channels
        if installed is not None and channel not in installed:
            names = ", ".join(sorted(installed)) or "(none)"
            return (
                f"unknown channel {channel!r} for the {what} of agent {agent!r} "
                f"(installed channels: {names})"
            )
        spec = self.known.agents.get(agent)
        if requires_binding(self.known.schema(channel)) and (
            spec is None or channel not in spec.bindings
        ):
            return (
                f"channel {channel!r} needs a binding, and agent {agent!r} has none "
                f"(add agents.{agent}.{channel})"
            )
        return None

    def _spec(
        self,
        job_id: str,
        model: JobModel,
        schedule: Schedule,
        jitter: int,
        config: dict[str, Any],
        index: int,
    ) -> JobSpec:
        target = model.failure_to
        failure_to = None if target is None else DeliverTarget(target.channel, target.to)
        limits = None
        if model.host_limits is not None:
            limits = model.host_limits.model_dump(exclude_none=True) or None
        digest = definition_hash(
            model.kind,
            model.agent,
            schedule,
            jitter,
            config,
            failure_to,
            model.paused_on_boot,
            limits,
        )
        return JobSpec(
            id=job_id,
            kind=model.kind,
            agent=model.agent,
            schedule=schedule,
            jitter_ms=jitter,
            config=config,
            failure_to=failure_to,
            paused_on_boot=model.paused_on_boot,
            line=self.doc.line_of(("pollers", "jobs", index)),
            definition_hash=digest,
            host_limits=limits,
        )

    def _unknown_kind(self, kind: str) -> str:
        message = f"unknown kind {kind!r} (known kinds: {self.known_kinds})"
        close = difflib.get_close_matches(kind, list(self.validators), n=1)
        return f"{message}; did you mean {close[0]!r}?" if close else message

    def _schedule(
        self, raw: dict[str, Any], problems: list[tuple[Path, str]]
    ) -> tuple[Schedule | None, int | None]:
        """The job's schedule (via the one strict parser) and its ``stagger_jitter_ms``."""
        rest = dict(raw)
        stagger = rest.pop("stagger_jitter_ms", None)
        if stagger is not None and (
            isinstance(stagger, bool)
            or not isinstance(stagger, int)
            or not 0 <= stagger <= MAX_JITTER_MS
        ):
            message = f"must be an integer from 0 to {MAX_JITTER_MS} (milliseconds)"
            problems.append((("schedule", "stagger_jitter_ms"), message))
            stagger = None
        try:
            return schedule_from_dict(rest, now=self.now), stagger
        except ScheduleError as exc:
            field = () if exc.field is None else (exc.field,)
            problems.append((("schedule", *field), exc.message))
            return None, stagger

    def _expanded_config(
        self, raw: dict[str, Any], problems: list[tuple[Path, str]], secrets: set[str]
    ) -> dict[str, Any] | None:
        """The config with ``${VAR}`` expanded, or None after recording why it cannot be."""
        refs = ref_strings(raw, ("config",), [])
        before = len(problems)
        for rel, text in refs:
            problems.extend(env_problems(rel, text, self.env))
        if len(problems) > before:
            return None
        secrets.update(secret_values(raw, self.env))
        # Always a fresh copy: a validator that mutates its argument must not alter
        # the raw config stored in the JobSpec (or its hash).
        result: dict[str, Any] = expand_env(raw, self.env, path="config")
        return result

    def _validate(
        self, kind: str, config: dict[str, Any], problems: list[tuple[Path, str]]
    ) -> None:
        try:
            self.validators[kind](config)
        except ConfigError as exc:
            rel = split_path(exc.path)
            rel = rel[1:] if rel[:1] == ("config",) else rel
            problems.append((("config", *rel), getattr(exc, "reason", str(exc))))
        except ValidationError as exc:
            problems.extend((("config", *loc), msg) for loc, msg in pydantic_problems(exc, {}))
        except Exception as exc:  # a buggy validator rejects its job, not the whole file
            problems.append(
                (("config",), f"validator for kind {kind!r} failed: {type(exc).__name__}: {exc}")
            )
