"""Request and response models: they validate requests and generate the OpenAPI document."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

JOB_ID_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,99}$"
UUID_PATTERN = r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$"
MAX_PAGE = 500
#: query text: no NUL (PostgreSQL refuses it) and no U+FFFD (what Django makes of invalid UTF-8)
QUERY_TEXT = "^[^\\x00\\ufffd]*$"


class Strict(BaseModel):
    """A query string: unknown parameters refused."""

    model_config = ConfigDict(extra="forbid")


class Body(BaseModel):
    """A JSON body: unknown fields refused, and no coercion: a flag is JSON true or false
    (never 1 or "true"), a number a JSON integer where the schema says integer."""

    model_config = ConfigDict(extra="forbid", strict=True)


def _query_int(value: Any) -> Any:
    if isinstance(value, str) and not re.fullmatch(r"[0-9]{1,9}", value):
        raise ValueError("must be a whole number written in digits (0-9)")
    return int(value) if isinstance(value, str) else value


def _query_bool(value: Any) -> Any:
    if isinstance(value, str):
        if value not in ("true", "false"):
            raise ValueError("must be true or false")
        return value == "true"
    return value


def _json_bool(value: Any) -> Any:
    if not isinstance(value, bool):  # Literal[True] alone takes 1 and 1.0 (they equal True)
        raise ValueError("must be JSON true or false")
    return value


QueryInt = Annotated[int, BeforeValidator(_query_int)]
QueryBool = Annotated[bool, BeforeValidator(_query_bool)]


# --- errors --------------------------------------------------------------------------
class ErrorDetail(BaseModel):
    code: str = Field(
        description="bad_request, unauthorized, forbidden, csrf_failed, "
        "not_found, method_not_allowed, conflict, too_large, invalid, "
        "rate_limited, internal_error, run_failed, unavailable"
    )
    message: str
    details: Any = None


class ErrorBody(BaseModel):
    error: ErrorDetail


# --- jobs --------------------------------------------------------------------------
class JobQuery(Strict):
    kind: str | None = Field(
        None, max_length=64, pattern=QUERY_TEXT, description="only jobs of this kind"
    )
    agent: str | None = Field(
        None, max_length=100, pattern=QUERY_TEXT, description="only jobs of this agent"
    )
    status: Literal["ok", "transient", "permanent", "skipped", "never"] | None = Field(
        None, description="last tick's outcome (never: not ticked yet)"
    )
    paused: QueryBool | None = Field(None, description="true or false")
    limit: QueryInt = Field(50, ge=1, le=MAX_PAGE)
    after: str | None = Field(
        None,
        max_length=100,
        pattern=QUERY_TEXT,
        description="the previous page's next_after (job ids ascend)",
    )


class Job(BaseModel):
    id: str
    kind: str
    agent: str
    schedule: dict[str, Any]
    stagger_ms: int
    failure_to: dict[str, Any] | None = None
    next_slot_at: str | None = Field(
        None, description="the next slot (== next_run_at); null while paused"
    )
    paused: bool | None = None
    paused_reason: str | None = None
    paused_by: str | None = Field(
        None,
        description="operator, boot (paused_on_boot), error (a reload that changes "
        "the definition resumes it) or schedule (a one-shot fired)",
    )
    notice: str | None = Field(
        None,
        description="what the poller asked operators to know (masked), e.g. an "
        "automatic re-baseline",
    )
    notice_at: str | None = None
    status: str | None = Field(None, description="ok, transient, permanent, skipped or never")
    last_error: str | None = Field(None, description="masked: never a secret's value")
    consecutive_errors: int | None = None
    breaker: Literal["closed", "half-open", "open"] | None = None
    epoch: int | None = None
    last_run_at: str | None = None
    next_run_at: str | None = Field(None, description="null while paused")
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


class RunRequest(Body):
    wait: bool = Field(
        True,
        description="true: wait for the worker up to NEXOPOLL_RUN_WAIT_SECS (then 202); "
        "false: answer 202 at once",
    )
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
    """Queued, or still running on a worker: poll status_url for the result"""

    job_id: str
    task_id: str
    status_url: str = Field(description="GET it for the run's state and, once done, its result")


class RunState(BaseModel):
    """A run's state; its result once done"""

    job_id: str
    task_id: str
    state: Literal["queued", "running", "done", "failed"] = Field(
        description="failed: the worker could not tick it (error says why)"
    )
    result: TickResult | None = Field(None, description="the tick's result, once done")
    error: str | None = None


class ResetRequest(Body):
    confirm: Annotated[Literal[True], BeforeValidator(_json_bool)] = Field(
        description="must be true: a reset clears the cursor, errors and breaker"
    )


class Done(BaseModel):
    job_id: str
    action: Literal["paused", "resumed", "reset"]
    job: Job


class ReloadRequest(Body):
    dry_run: bool = False
    strict: bool = False


class ReloadPlan(BaseModel):
    add: list[str]
    replace: list[str]
    remove: list[str]
    keep: list[str]
    kept_invalid: list[str]
    resumed: list[str] = Field(
        default_factory=list, description="replaced jobs an error had paused, resumed"
    )
    issues: list[str]
    applied: bool
    source: str
    warnings: list[str] = []  # jobs that load but will fail (a URL on a private address)


# --- the outbox --------------------------------------------------------------------
class DeliveryQuery(Strict):
    status: Literal["pending", "held", "dead", "sent"] | None = None
    job_id: str | None = Field(None, max_length=100, pattern=QUERY_TEXT)
    limit: QueryInt = Field(50, ge=1, le=MAX_PAGE)
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


class RedeliverRequest(Body):
    force: bool = Field(False, description="send a row that was already sent again")


class Redelivered(BaseModel):
    redelivered: list[str]
