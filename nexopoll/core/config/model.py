"""What a loaded ``pollers.yaml`` is: issues, settings, job and agent specs, shape models.

Pure. The pydantic models here check structure and types only (strict: a YAML
string is never coerced into a bool or a number); meaning is checked by the
loaders in :mod:`.jobs` and :mod:`.agents`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..limits import CHANNEL_RE, MAX_RECIPIENT, is_name, must_match, unsafe_char
from ..schedule import SCHEDULE_FIELDS, Schedule, schedule_to_dict
from ..yamlsrc import Path

MAX_JOBS = 100_000
# Every number in the file has bounds that the DB (32-bit integer columns) and
# ``timedelta`` hold with room to spare; a value past them is refused at load.
MAX_JITTER_MS = 86_400_000  # 1 day
MAX_ALERT_COOLDOWN_SECS = 366 * 86_400  # 1 year
MAX_BREAKER_THRESHOLD = 10_000
MAX_LEASE_TTL_FACTOR = 1000

_CANONICAL_JSON = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
)


@dataclass(frozen=True)
class ConfigIssue:
    """One problem found in the file, located by source, line, job and field path.

    An agent's issue names the agent in ``agent_id``; the first issue of an agent also
    lists in ``rejects`` the jobs it rejects (they get no issue of their own).
    """

    source: str
    line: int | None
    job_id: str | None
    path: str
    message: str
    agent_id: str | None = None
    rejects: tuple[str, ...] = ()

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        message = self.message
        if self.rejects:
            shown = ", ".join(self.rejects[:MAX_LISTED])
            more = len(self.rejects) - MAX_LISTED
            shown += f" and {more} more" if more > 0 else ""
            message += f" (agent {self.agent_id!r} is rejected, and with it its jobs: {shown})"
        return f"{where}: {self.path}: {message}" if self.path else f"{where}: {message}"

    @property
    def job_ids(self) -> tuple[str, ...]:
        """The jobs this issue rejects (they keep their last good definitions)."""
        return self.rejects if self.job_id is None else (self.job_id, *self.rejects)


MAX_LISTED = 10  # job ids an agent's issue names before "and N more"


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
    host_limits: dict[str, int] | None = None  # per-job override of the per-host caps


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


# --- field paths --------------------------------------------------------------------


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_@:/+-][A-Za-z0-9_@:/+.-]*", re.ASCII)


def fmt_path(label: str, rel: Path) -> str:
    """``fmt_path("jobs[a]", ("config", "items", 2))`` -> ``"jobs[a].config.items[2]"``.

    A key that is not plain ASCII (a newline, a control or format character, a
    space, a dot) is written quoted and escaped (``agents['evil\\n']``), so one
    issue is always one line.
    """
    out = [label]
    for part in rel:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _PLAIN_KEY.fullmatch(part):
            out.append(f".{part}")
        else:
            out.append(f"[{part!a}]")
    return "".join(out)


def split_path(path: str | None) -> Path:
    """Split a ConfigError path: ``"items[2].id"`` -> ``("items", 2, "id")``."""
    parts: list[str | int] = []
    for token in re.findall(r"[^.\[\]]+|\[\d+\]", path or "", re.ASCII):
        parts.append(int(token[1:-1]) if token.startswith("[") else token)
    return tuple(parts)


# --- pydantic models: structure and types only ------------------------------------

STRICT = ConfigDict(extra="forbid", strict=True)


class SettingsModel(BaseModel):
    model_config = STRICT
    enabled: bool = True
    state_db: str | None = None
    default_jitter_ms: int = Field(5000, ge=0, le=MAX_JITTER_MS)
    lease_ttl_factor: float = Field(2.0, gt=0, le=MAX_LEASE_TTL_FACTOR, allow_inf_nan=False)
    failure_alert_cooldown_secs: int = Field(3600, ge=0, le=MAX_ALERT_COOLDOWN_SECS)
    breaker_threshold: int = Field(5, ge=1, le=MAX_BREAKER_THRESHOLD)
    jobs: list[Any] | None = None


class DeliverTargetModel(BaseModel):
    """A ``{channel, to}`` target as the outbox stores it (``failure_to``; pollers' ``deliver``).

    The channel name and the recipient fit their DB columns (:mod:`nexopoll.core.limits`);
    ``to`` may be written as an integer (a Telegram chat id) and is kept as a string.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    channel: str
    to: str = Field(min_length=1, max_length=MAX_RECIPIENT)

    @field_validator("to", mode="before")
    @classmethod
    def _int_recipient(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return value

    @field_validator("channel")
    @classmethod
    def _channel_name(cls, value: str) -> str:
        if not is_name(CHANNEL_RE, value):
            raise ValueError(must_match("channel name", CHANNEL_RE))
        return value

    @field_validator("to")
    @classmethod
    def _printable_recipient(cls, value: str) -> str:
        bad = unsafe_char(value)
        if bad is not None:
            raise ValueError(f"recipient contains the control or format character {bad!a}")
        return value


FailureToModel = DeliverTargetModel

MAX_HOST_IN_FLIGHT = 10_000
MAX_HOST_PER_SEC = 100_000


class HostLimitsModel(BaseModel):
    """Per-host politeness for one job's fetches: requests in flight to one host at once
    and requests per second to it, across every worker (0: no cap)."""

    model_config = STRICT
    in_flight: int | None = Field(default=None, ge=0, le=MAX_HOST_IN_FLIGHT)
    per_sec: int | None = Field(default=None, ge=0, le=MAX_HOST_PER_SEC)


class JobModel(BaseModel):
    model_config = STRICT
    id: str
    kind: str
    agent: str
    schedule: dict[str, Any]
    config: dict[str, Any] | None = None
    failure_to: FailureToModel | None = None
    paused_on_boot: bool = False
    host_limits: HostLimitsModel | None = None


JOB_FIELDS: dict[Path, list[str]] = {
    (): sorted(JobModel.model_fields),
    ("host_limits",): sorted(HostLimitsModel.model_fields),
    ("schedule",): sorted([*SCHEDULE_FIELDS, "stagger_jitter_ms"]),
    ("failure_to",): sorted(FailureToModel.model_fields),
}


def pydantic_problems(
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


def definition_hash(
    kind: str,
    agent: str,
    schedule: Schedule,
    jitter_ms: int,
    config: dict[str, Any],
    failure_to: DeliverTarget | None,
    paused_on_boot: bool,
    host_limits: dict[str, int] | None = None,
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
    if host_limits:  # absent from the hash when unset: existing jobs keep their hashes
        payload["host_limits"] = host_limits
    canonical = _CANONICAL_JSON.encode(payload)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
