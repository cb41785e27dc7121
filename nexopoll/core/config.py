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

import difflib
import hashlib
import json
import re
import zoneinfo
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .envrefs import SINGLE_REF_RE as _SINGLE_REF_RE
from .envrefs import env_refs, expand_env, expand_text, is_secret_key, ref_strings
from .errors import ConfigError
from .schedule import (
    AtSchedule,
    EverySchedule,
    Schedule,
    ScheduleError,
    parse_cron,
    schedule_to_dict,
)
from .yamlsrc import Path, SourceDoc, YamlSourceError, load_yaml

JOB_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,99}$")
AGENT_ID_RE = JOB_ID_RE
CHANNEL_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
MAX_JOBS = 10_000
MAX_EVERY_SECS = 366 * 86_400
MAX_JITTER_MS = 86_400_000

_RFC3339_RE = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})?$"
)
_MIN_REDACT_LEN = 4
_CANONICAL_JSON = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
)


@dataclass(frozen=True)
class ConfigIssue:
    """One problem found in the file, located by source, line, job and field path."""

    source: str
    line: int | None
    job_id: str | None
    path: str
    message: str

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class ConfigFileError(Exception):
    """The whole file is unusable; nothing in it may be applied."""

    def __init__(self, issues: list[ConfigIssue]) -> None:
        self.issues = list(issues)
        super().__init__("\n".join(str(issue) for issue in self.issues))


@dataclass(frozen=True)
class DeliverTarget:
    channel: str
    to: str


@dataclass(frozen=True)
class PollersSettings:
    enabled: bool = True
    default_jitter_ms: int = 5000
    lease_ttl_factor: float = 2.0
    failure_alert_cooldown_secs: int = 3600
    breaker_threshold: int = 5


@dataclass(frozen=True)
class JobSpec:
    """A validated job. ``config`` is raw: ``${VAR}`` strings are not expanded."""

    id: str
    kind: str
    agent: str
    schedule: Schedule
    jitter_ms: int
    config: dict[str, Any]
    failure_to: DeliverTarget | None
    paused_on_boot: bool
    line: int | None
    definition_hash: str


@dataclass(frozen=True)
class AgentSpec:
    """An agent's channel bindings (channel name -> raw, unexpanded binding)."""

    id: str
    bindings: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class LoadedConfig:
    settings: PollersSettings
    jobs: dict[str, JobSpec]
    agents: dict[str, AgentSpec]
    issues: list[ConfigIssue]


def _walk(value: Any, rel: Path) -> Iterator[tuple[Path, Any]]:
    yield rel, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, (*rel, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, (*rel, index))


def _fmt(label: str, rel: Path) -> str:
    return label + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in rel)


def _split_path(path: str | None) -> Path:
    """Split a ConfigError path: ``"items[2].id"`` -> ``("items", 2, "id")``."""
    parts: list[str | int] = []
    for token in re.findall(r"[^.\[\]]+|\[\d+\]", path or ""):
        parts.append(int(token[1:-1]) if token.startswith("[") else token)
    return tuple(parts)


# --- pydantic models: structure and types only ------------------------------------

_STRICT = ConfigDict(extra="forbid", strict=True)


class _SettingsModel(BaseModel):
    model_config = _STRICT
    enabled: bool = True
    state_db: str | None = None
    default_jitter_ms: int = Field(5000, ge=0, le=MAX_JITTER_MS)
    lease_ttl_factor: float = Field(2.0, gt=0, le=1000, allow_inf_nan=False)
    failure_alert_cooldown_secs: int = Field(3600, ge=0)
    breaker_threshold: int = Field(5, ge=1)
    jobs: list[Any] | None = None


class _ScheduleModel(BaseModel):
    model_config = _STRICT
    every_secs: float | None = Field(None, gt=0, le=MAX_EVERY_SECS, allow_inf_nan=False)
    cron: str | None = None
    tz: str | None = None
    at: str | None = None
    stagger_jitter_ms: int | None = Field(None, ge=0, le=MAX_JITTER_MS)


class _FailureToModel(BaseModel):
    model_config = _STRICT
    channel: str
    to: str = Field(min_length=1)

    @field_validator("to", mode="before")
    @classmethod
    def _int_recipient(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return value


class _JobModel(BaseModel):
    model_config = _STRICT
    id: str
    kind: str
    agent: str
    schedule: _ScheduleModel
    config: dict[str, Any] | None = None
    failure_to: _FailureToModel | None = None
    paused_on_boot: bool = False


_ALLOWED = {
    (): sorted(_JobModel.model_fields),
    ("schedule",): sorted(_ScheduleModel.model_fields),
    ("failure_to",): sorted(_FailureToModel.model_fields),
}


def _pydantic_problems(
    exc: ValidationError, allowed: Mapping[Path, list[str]]
) -> list[tuple[Path, str]]:
    """(loc, message) pairs; never includes the offending input value."""
    problems = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False):
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden":
            names = allowed.get(loc[:-1])
            message = "unknown field" + (f" (allowed: {', '.join(names)})" if names else "")
        elif err["type"] == "missing":
            message = "field required"
        else:
            message = str(err["msg"]).removeprefix("Value error, ")
        problems.append((loc, message))
    return problems


# --- loading -----------------------------------------------------------------------


def load_config(
    text: str | bytes,
    *,
    source: str,
    env: Mapping[str, str],
    now: datetime,
    validators: Mapping[str, Callable[[dict[str, Any]], None]],
) -> LoadedConfig:
    """Parse and validate a ``pollers.yaml`` text.

    Args:
        text: The file content (at most 1 MiB).
        source: File name used in messages (``config/pollers.yaml``).
        env: Environment used to check and expand ``${VAR}`` references.
        now: Current aware time, used to reject cron expressions that never fire.
        validators: ``kind -> Poller.validate``; each is called with the job's
            config after ``${VAR}`` expansion and rejects the job by raising
            ``ConfigError`` or a pydantic ``ValidationError``.

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
    settings, raw_jobs = _load_settings(doc, source)
    agents, bad_agents, issues = _load_agents(doc, source, env)
    if not settings.enabled:
        return LoadedConfig(settings, {}, agents, issues)
    loader = _JobLoader(doc, source, env, now, validators, settings, bad_agents)
    jobs = loader.load(raw_jobs)
    return LoadedConfig(settings, jobs, agents, issues + loader.issues)


def _file_error(doc: SourceDoc, source: str, rel: Path, path: str, message: str) -> ConfigFileError:
    return ConfigFileError([ConfigIssue(source, doc.line_of(rel), None, path, message)])


def _check_top_level(doc: SourceDoc, source: str) -> None:
    root = doc.value
    if not isinstance(root, dict):
        raise _file_error(
            doc, source, (), "", "top level must be a mapping with 'pollers:' (and 'agents:')"
        )
    unknown = [key for key in root if key not in ("pollers", "agents")]
    if unknown:
        raise ConfigFileError(
            [
                ConfigIssue(
                    source,
                    doc.line_of((key,)),
                    None,
                    key,
                    "unknown top-level key (allowed: agents, pollers)",
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
        raise _file_error(doc, source, ("pollers",), "pollers", "must be a mapping")
    try:
        model = _SettingsModel.model_validate(raw)
    except ValidationError as exc:
        allowed = {(): sorted(_SettingsModel.model_fields)}
        raise ConfigFileError(
            [
                ConfigIssue(source, doc.line_of(("pollers", *loc)), None, _fmt("pollers", loc), msg)
                for loc, msg in _pydantic_problems(exc, allowed)
            ]
        ) from None
    jobs = raw.get("jobs") or []
    if len(jobs) > MAX_JOBS:
        raise _file_error(
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


def _load_agents(
    doc: SourceDoc, source: str, env: Mapping[str, str]
) -> tuple[dict[str, AgentSpec], set[str], list[ConfigIssue]]:
    raw = doc.value.get("agents")
    if raw is None:
        return {}, set(), []
    if not isinstance(raw, dict):
        raise _file_error(
            doc, source, ("agents",), "agents", "must be a mapping of agent id to channel bindings"
        )
    agents: dict[str, AgentSpec] = {}
    bad: set[str] = set()
    issues: list[ConfigIssue] = []
    for agent_id, bindings in raw.items():
        problems = list(_agent_problems(agent_id, bindings, env))
        for rel, message in problems:
            line = doc.line_of(("agents", agent_id, *rel))
            issues.append(
                ConfigIssue(source, line, None, _fmt("agents", (agent_id, *rel)), message)
            )
        if problems:
            bad.add(agent_id)
        else:
            agents[agent_id] = AgentSpec(agent_id, dict(bindings or {}))
    return agents, bad, issues


def _agent_problems(
    agent_id: str, bindings: Any, env: Mapping[str, str]
) -> Iterator[tuple[Path, str]]:
    if not AGENT_ID_RE.match(agent_id):
        yield (), f"invalid agent id (must match {AGENT_ID_RE.pattern})"
    if bindings is None:
        return
    if not isinstance(bindings, dict):
        yield (), "must be a mapping of channel name to binding"
        return
    for channel, binding in bindings.items():
        if not CHANNEL_RE.match(channel):
            yield (channel,), f"invalid channel name (must match {CHANNEL_RE.pattern})"
        if not isinstance(binding, dict):
            yield (channel,), "binding must be a mapping"
            continue
        for rel, value in _walk(binding, (channel,)):
            key = rel[-1]
            if (
                isinstance(key, str)
                and len(rel) > 1
                and is_secret_key(key)
                and not (isinstance(value, str) and _SINGLE_REF_RE.match(value))
            ):
                yield rel, "secrets must be given as ${ENV_VAR} references"
            yield from _env_problems(rel, value, env)


def _env_problems(rel: Path, value: Any, env: Mapping[str, str]) -> Iterator[tuple[Path, str]]:
    """Missing or malformed ``${VAR}`` references in one string value."""
    if not isinstance(value, str) or "${" not in value:
        return
    for name in sorted(env_refs(value)):
        if name not in env:
            yield rel, f"environment variable {name} is not set"
    try:
        expand_text(value, {name: "" for name in env_refs(value)}, "")
    except ConfigError as exc:
        yield rel, exc.reason


class _JobLoader:
    """Validates jobs one by one; a bad job becomes issues and never stops its siblings."""

    def __init__(
        self,
        doc: SourceDoc,
        source: str,
        env: Mapping[str, str],
        now: datetime,
        validators: Mapping[str, Callable[[dict[str, Any]], None]],
        settings: PollersSettings,
        bad_agents: set[str],
    ) -> None:
        self.doc, self.source, self.env, self.now = doc, source, env, now
        self.validators, self.settings, self.bad_agents = validators, settings, bad_agents
        self.known_kinds = ", ".join(sorted(validators)) or "(none)"
        self.issues: list[ConfigIssue] = []
        self.first_line: dict[str, int | None] = {}

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
        job_id = raw_id if isinstance(raw_id, str) and JOB_ID_RE.match(raw_id) else None
        label = f"jobs[{job_id or index}]"
        problems: list[tuple[Path, str]] = []
        redact: list[str] = []
        spec = None
        if isinstance(item, dict):
            spec = self._check(index, item, job_id, problems, redact)
        else:
            problems.append(((), "each job must be a mapping"))
        for rel, message in problems:
            for secret in redact:
                message = message.replace(secret, "***")
            self.issues.append(
                ConfigIssue(
                    self.source, self.doc.line_of((*base, *rel)), job_id, _fmt(label, rel), message
                )
            )
        return None if problems else spec

    def _check(
        self,
        index: int,
        item: dict[str, Any],
        job_id: str | None,
        problems: list[tuple[Path, str]],
        redact: list[str],
    ) -> JobSpec | None:
        self._check_duplicate(index, job_id, problems)
        try:
            model = _JobModel.model_validate(item)
        except ValidationError as exc:
            problems.extend(_pydantic_problems(exc, _ALLOWED))
            return None
        if job_id is None:
            problems.append((("id",), f"invalid job id (must match {JOB_ID_RE.pattern})"))
        self._check_names(model, problems)
        outside = {k: v for k, v in item.items() if k != "config"}
        for rel, _ in ref_strings(outside, (), []):
            message = "${...} references are only allowed inside config: and agents: bindings"
            problems.append((rel, message))
        schedule = self._schedule(model.schedule, problems)
        raw_config: dict[str, Any] = item.get("config") or {}
        config = self._expanded_config(raw_config, problems, redact)
        if model.kind not in self.validators:
            problems.append((("kind",), self._unknown_kind(model.kind)))
        elif config is not None:
            self._validate(model.kind, config, problems)
        if problems or schedule is None or job_id is None:
            return None
        return self._spec(job_id, model, schedule, raw_config, index)

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

    def _check_names(self, model: _JobModel, problems: list[tuple[Path, str]]) -> None:
        agent = model.agent
        if not AGENT_ID_RE.match(agent):
            problems.append((("agent",), f"invalid agent id (must match {AGENT_ID_RE.pattern})"))
        elif agent in self.bad_agents:
            message = f"agent {agent!r} has configuration errors (see agents.{agent})"
            problems.append((("agent",), message))
        if model.failure_to is not None and not CHANNEL_RE.match(model.failure_to.channel):
            message = f"invalid channel name (must match {CHANNEL_RE.pattern})"
            problems.append((("failure_to", "channel"), message))

    def _spec(
        self, job_id: str, model: _JobModel, schedule: Schedule, config: dict[str, Any], index: int
    ) -> JobSpec:
        stagger = model.schedule.stagger_jitter_ms
        jitter = self.settings.default_jitter_ms if stagger is None else stagger
        target = model.failure_to
        failure_to = None if target is None else DeliverTarget(target.channel, target.to)
        digest = definition_hash(
            model.kind, model.agent, schedule, jitter, config, failure_to, model.paused_on_boot
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
        )

    def _unknown_kind(self, kind: str) -> str:
        message = f"unknown kind {kind!r} (known kinds: {self.known_kinds})"
        close = difflib.get_close_matches(kind, list(self.validators), n=1)
        return f"{message}; did you mean {close[0]!r}?" if close else message

    def _schedule(self, sched: _ScheduleModel, problems: list[tuple[Path, str]]) -> Schedule | None:
        try:
            return _build_schedule(sched, self.now)
        except _FieldError as exc:
            problems.append((("schedule", *exc.rel), exc.message))
            return None

    def _expanded_config(
        self, raw: dict[str, Any], problems: list[tuple[Path, str]], redact: list[str]
    ) -> dict[str, Any] | None:
        """The config with ``${VAR}`` expanded, or None after recording why it cannot be."""
        refs = ref_strings(raw, ("config",), [])
        before = len(problems)
        for rel, text in refs:
            problems.extend(_env_problems(rel, text, self.env))
        if len(problems) > before:
            return None
        if refs:
            values = {self.env[name] for name in env_refs(raw)}
            long_enough = (v for v in values if len(v) >= _MIN_REDACT_LEN)
            redact.extend(sorted(long_enough, key=len, reverse=True))
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
            rel = _split_path(exc.path)
            rel = rel[1:] if rel[:1] == ("config",) else rel
            problems.append((("config", *rel), getattr(exc, "reason", str(exc))))
        except ValidationError as exc:
            problems.extend((("config", *loc), msg) for loc, msg in _pydantic_problems(exc, {}))
        except Exception as exc:  # a buggy validator rejects its job, not the whole file
            problems.append(
                (("config",), f"validator for kind {kind!r} failed: {type(exc).__name__}: {exc}")
            )


class _FieldError(Exception):
    def __init__(self, rel: Path, message: str) -> None:
        super().__init__(message)
        self.rel = rel
        self.message = message


def _build_schedule(sched: _ScheduleModel, now: datetime) -> Schedule:
    """Turn a validated ``schedule:`` block into a Schedule; cron and tz checked now."""
    given = [name for name in ("every_secs", "cron", "at") if getattr(sched, name) is not None]
    if len(given) != 1:
        got = f" (got {', '.join(given)})" if given else ""
        raise _FieldError((), f"must set exactly one of every_secs, cron, at{got}")
    if sched.tz is not None and sched.cron is None:
        raise _FieldError(("tz",), "tz is only valid with cron")
    try:
        if sched.every_secs is not None:
            every = timedelta(seconds=sched.every_secs)
            if every <= timedelta(0):
                raise _FieldError(("every_secs",), "must be at least one microsecond")
            return EverySchedule(every=every)
        if sched.cron is not None:
            tz = "UTC" if sched.tz is None else sched.tz
            _check_zone(tz)
            return parse_cron(sched.cron, tz, now=now)
        return AtSchedule(at=_parse_rfc3339(str(sched.at)))
    except ScheduleError as exc:
        # schedule.py's messages already quote the expression ("invalid cron expression
        # '61 * * * *': ...", "cron expression '...' never fires").
        raise _FieldError((given[0],), str(exc)) from None


def _check_zone(tz: str) -> None:
    try:
        zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise _FieldError(("tz",), f"unknown time zone {tz!r}") from None


def _parse_rfc3339(text: str) -> datetime:
    """Parse an RFC3339 instant with an explicit offset; return it in UTC.

    ``"2026-04-26T17:00:00+02:00"`` -> ``2026-04-26 15:00:00+00:00``. A timestamp
    without an offset is refused rather than guessed.
    """
    match = _RFC3339_RE.match(text.strip())
    if match is None:
        raise _FieldError(
            ("at",), f"{text!r} is not an RFC3339 timestamp (e.g. '2026-04-26T15:00:00Z')"
        )
    date, time, fraction, offset = match.groups()
    if offset is None:
        raise _FieldError(("at",), f"{text!r} has no UTC offset: add 'Z' or e.g. '+02:00'")
    micros = f".{(fraction or '0')[:6]:0<6}"
    try:
        parsed = datetime.fromisoformat(f"{date}T{time}{micros}{offset.upper()}")
    except ValueError:
        raise _FieldError(("at",), f"{text!r} is not a valid date and time") from None
    return parsed.astimezone(UTC)


def definition_hash(
    kind: str,
    agent: str,
    schedule: Schedule,
    jitter_ms: int,
    config: dict[str, Any],
    failure_to: DeliverTarget | None,
    paused_on_boot: bool,
) -> str:
    """sha256 hex of a canonical JSON of a job definition; key order does not matter."""
    payload = {
        "kind": kind,
        "agent": agent,
        "schedule": schedule_to_dict(schedule),
        "jitter_ms": jitter_ms,
        "config": config,
        "failure_to": None
        if failure_to is None
        else {"channel": failure_to.channel, "to": failure_to.to},
        "paused_on_boot": paused_on_boot,
    }
    canonical = _CANONICAL_JSON.encode(payload)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
