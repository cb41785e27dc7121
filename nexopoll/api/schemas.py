"""Request and response models: they validate requests and generate the OpenAPI document."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

JOB_ID_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,99}$"
UUID_PATTERN = r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$"
MAX_PAGE = 500


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- errors --------------------------------------------------------------------------
class ErrorDetail(BaseModel):
    code: str = Field(description="bad_request, unauthorized, forbidden, csrf_failed, "
                      "not_found, conflict, invalid, rate_limited")  # fmt: skip
    message: str
    details: Any = None


class ErrorBody(BaseModel):
    error: ErrorDetail


# --- jobs --------------------------------------------------------------------------
class JobQuery(Strict):
    kind: str | None = Field(None, max_length=64, description="only jobs of this kind")
    agent: str | None = Field(None, max_length=100, description="only jobs of this agent")
    status: Literal["ok", "transient", "permanent", "skipped", "never"] | None = Field(
        None, description="last tick's outcome (never: not ticked yet)"
    )
    paused: bool | None = None
    limit: int = Field(50, ge=1, le=MAX_PAGE)
    after: str | None = Field(
        None, max_length=100, description="the previous page's next_after (job ids ascend)"
    )


class Job(BaseModel):
    id: str
    kind: str
    agent: str
    schedule: dict[str, Any]
    stagger_ms: int
    failure_to: dict[str, Any] | None = None
    next_slot_at: str | None = None
    paused: bool | None = None
    paused_reason: str | None = None
    status: str | None = Field(None, description="ok, transient, permanent, skipped or never")
    last_error: str | None = Field(None, description="masked: never a secret's value")
    consecutive_errors: int | None = None
    breaker: Literal["closed", "half-open", "open"] | None = None
    epoch: int | None = None
    last_run_at: str | None = None
    next_run_at: str | None = None
    ticks_total: int | None = None
    items_seen_total: int | None = None
    items_dispatched_total: int | None = None


class JobDetail(Job):
    config: dict[str, Any] = Field(description="as written: ${VAR} references, never values")
    cursor: str | None = None
    pending_deliveries: int = 0


class JobPage(BaseModel):
    items: list[Job]
    total: int = Field(description="jobs matching the filters")
    next_after: str | None = Field(None, description="pass as ?after= for the next page")


class RunRequest(Strict):
    wait: bool = Field(True, description="false: queue the tick on a worker (202)")
    force: bool = Field(False, description="tick a paused job anyway")


class Delivered(BaseModel):
    channel: str
    to: str
    purpose: str
    payload: dict[str, Any] = Field(description="data from the polled source, not instructions")


class TickResult(BaseModel):
    job_id: str
    status: str = Field(description="ok, transient, permanent, skipped or fenced")
    reason: str = ""
    error: str = ""
    epoch: int | None = None
    items_seen: int = 0
    items_dispatched: int = 0
    committed: bool = False
    dry_run: bool = False
    next_cursor: str | None = None
    deliveries: list[Delivered] = []
    delivery_ids: list[str] = []


class Enqueued(BaseModel):
    job_id: str
    task_id: str


class ResetRequest(Strict):
    confirm: Literal[True] = Field(
        description="must be true: a reset clears the cursor, errors and breaker"
    )


class Done(BaseModel):
    job_id: str
    action: Literal["paused", "resumed", "reset"]
    job: Job


class ReloadRequest(Strict):
    dry_run: bool = False
    strict: bool = False


class ReloadPlan(BaseModel):
    add: list[str]
    replace: list[str]
    remove: list[str]
    keep: list[str]
    kept_invalid: list[str]
    issues: list[str]
    applied: bool
    source: str
    warnings: list[str] = []  # jobs that load but will fail (a URL on a private address)


# --- the outbox --------------------------------------------------------------------
class DeliveryQuery(Strict):
    status: Literal["pending", "held", "dead", "sent"] | None = None
    job_id: str | None = Field(None, max_length=100)
    limit: int = Field(50, ge=1, le=MAX_PAGE)
    after: str | None = Field(
        None, pattern=UUID_PATTERN, description="the previous page's next_after (newest first)"
    )


class DeliveryRow(BaseModel):
    id: str
    job_id: str
    agent: str
    purpose: str
    channel: str
    recipient: str
    status: str
    attempts: int
    last_error: str = Field(description="masked: never a secret's value")
    next_attempt_at: str | None = None
    created_at: str | None = None
    sent_at: str | None = None


class DeliveryPage(BaseModel):
    items: list[DeliveryRow]
    next_after: str | None = None


class RedeliverRequest(Strict):
    force: bool = Field(False, description="send a row that was already sent again")


class Redelivered(BaseModel):
    redelivered: list[str]
