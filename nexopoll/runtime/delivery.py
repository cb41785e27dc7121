"""Sending outbox rows: claim, send through the channel, record the attempt.

Each row is sent at least once; every attempt carries the row id as its
idempotency key. Failures back off (``NEXOPOLL_DELIVERY_BASE_SECS`` doubling,
capped at 5 min, ``Retry-After`` honoured) up to ``NEXOPOLL_DELIVERY_MAX_ATTEMPTS``,
after which the row is dead-lettered (status ``dead``) and logged.

A configuration problem found at send time — an unknown channel, an agent or
binding a reload removed (for a channel that needs one: ``log`` needs none), a
``${VAR}`` the worker's environment lacks, a channel raising ``ConfigError`` or
``CredentialsMissingError`` — is no failure of the row:
the row is **held** (status ``held``, the reason in ``last_error``, the attempt not
counted) and goes back to pending after the next reload, or by itself after
:data:`HOLD_RETRY` (see :mod:`nexopoll.runtime.outbox`).

Before a row is claimed it must be due and have its turn: a row paced by its job's
``dispatch_delay_ms`` (its ``next_attempt_at`` lies ahead) or held back by a
provider rate limit (:mod:`nexopoll.runtime.ratelimit`, the channel's
``rate_limits``) is **waiting**: not claimed, its attempt not counted, re-queued by
the deliver task with a countdown (outcome ``wait``).

Claims are taken and compared with the DB's clock (``CURRENT_TIMESTAMP``), so a
worker whose own clock runs ahead cannot take a row another worker is sending. A
claim bounds its send, and an outcome is written only under the worker's own claim
(:mod:`nexopoll.runtime.claims`; a send that lost its row: outcome ``lost``).
The ``clock`` a caller passes decides when a row is due and its backoff, taken in
the DB's clock (:mod:`nexopoll.runtime.dbclock`: this process's offset to it), as
every due time is: a worker whose clock is off neither delays rows nor sends them
early.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import F, Q
from django.db.models.functions import Now
from pydantic import ValidationError
from redis.exceptions import RedisError

from nexopoll.channels import OutboundMessage, get_channel
from nexopoll.core.bindings import BUILTIN_BINDING_SCHEMAS, requires_binding
from nexopoll.core.breaker import backoff_delay
from nexopoll.core.config import expand_env
from nexopoll.core.errors import (
    ConfigError,
    CredentialsMissingError,
    ErrorClass,
    PermanentError,
    classify,
)
from nexopoll.core.redact import redact, secret_values
from nexopoll.core.storable import storable_text

from ..models import Agent, Delivery, DeliveryStatus
from . import claims, dbclock, metricstore, ratelimit
from .redis import get_redis
from .secretenv import secret_env

log = logging.getLogger("nexopoll.delivery")

# the claim's length and a send's deadline live in claims.py (settings override them)
CLAIM_SECS, CLAIM, SEND_DEADLINE_SECS = claims.CLAIM_SECS, claims.CLAIM, claims.SEND_DEADLINE_SECS
SWEEP_GRACE = timedelta(seconds=5)
# a held row is tried again after this long even without a reload (a worker's env fixed)
HOLD_RETRY = timedelta(minutes=5)


BATCH_BUDGET_SECS = 60.0
# without Redis no turn can be taken: wait this long rather than risk exceeding a limit
RATE_LIMIT_UNAVAILABLE_WAIT = 5.0
# rows due within this many seconds go straight back on the queue (with a countdown);
# the sweeper queues the others when they are due
REQUEUE_WITHIN_SECS = 60.0


def deliver_rows(
    ids: list[str], *, clock: Callable[[], datetime], budget_secs: float = BATCH_BUDGET_SECS
) -> dict[str, str]:
    """Try to send each row; return id → outcome
    (sent | retry | dead | held | skipped | deferred | wait | lost).

    The clock is read per row (a claim or a backoff must not start from a time
    taken before a slow send) and taken in the DB's clock (:mod:`.dbclock`). Rows left
    when ``budget_secs`` is spent are ``deferred``: the caller re-enqueues them, so one
    task never outlives its limits.
    """
    outcomes: dict[str, str] = {}
    started = time.monotonic()
    for i in ids:
        if time.monotonic() - started > budget_secs:
            outcomes[i] = "deferred"
        else:
            outcomes[i] = deliver_one(i, now=dbclock.to_db(clock()))
    metricstore.record_outcomes(outcomes)  # poller_deliveries_total{channel,status}
    return outcomes


def live_claim() -> Q:
    """Rows nobody is sending now: no claim, or one that ran out by the DB's clock."""
    return Q(claimed_until__isnull=True) | Q(claimed_until__lt=Now())


def claim(delivery_id: str, *, now: datetime) -> bool:
    """Take the row for one attempt (counted), if it is pending, due and unclaimed.

    The claim's expiry is written and compared by the DB (``Now()`` is the DB's
    ``CURRENT_TIMESTAMP``): a worker's skewed clock cannot shorten another's claim.
    Taking the row also consumes its queued message (``enqueued_at`` cleared).
    """
    return bool(
        Delivery.objects.filter(
            live_claim(),
            id=delivery_id,
            status=DeliveryStatus.PENDING,
            next_attempt_at__lte=now,
            # a row whose send kills its worker never reaches _failed: cap it here too
            attempts__lt=settings.NEXOPOLL_DELIVERY_MAX_ATTEMPTS,
        ).update(
            claimed_until=Now() + timedelta(seconds=claims.claim_secs()),
            attempts=F("attempts") + 1,
            enqueued_at=None,
        )
    )


def deliver_one(delivery_id: str, *, now: datetime) -> str:
    if _must_wait(delivery_id, now=now):
        return "wait"
    claimed_at = time.monotonic()
    if not claim(delivery_id, now=now):
        return "skipped"
    row = Delivery.objects.get(id=delivery_id)
    mine = claims.mine(row)
    agent_bindings = _agent_bindings(row.agent)
    raw_binding = (agent_bindings or {}).get(row.channel, {})
    env = secret_env()
    secrets = secret_values(raw_binding, env)
    try:
        channel = get_channel(row.channel)
        binding = expand_env(raw_binding, env, path=f"agents.{row.agent}.{row.channel}")
        check_binding(channel, row.agent, binding, present=row.channel in (agent_bindings or {}))
        channel.send(_message(row), binding, deadline_secs=claims.send_deadline(claimed_at))
    except (ConfigError, CredentialsMissingError) as exc:
        reason = str(exc) or type(exc).__name__
        if agent_bindings is None:
            reason = f"agent {row.agent!r} is not declared (removed by a reload?): {reason}"
        return _held(row, mine, reason, now=now, secrets=secrets)
    except Exception as exc:
        return _failed(row, mine, exc, now=now, secrets=secrets)
    if not mine.update(status=DeliveryStatus.SENT, sent_at=now, claimed_until=None, last_error=""):
        return claims.lost(row, "sent")
    return "sent"


def _message(row: Delivery) -> OutboundMessage:
    return OutboundMessage(
        delivery_id=str(row.id),
        job_id=row.job_id,
        agent=row.agent,
        channel=row.channel,
        recipient=row.recipient,
        payload=row.payload,
        attempt=row.attempts,
        purpose=row.purpose,
    )


def check_binding(channel: Any, agent: str, binding: dict, *, present: bool) -> None:
    """ConfigError (the row is held) when ``binding`` does not fit the channel's schema.

    The loader checked it with the loader's environment; a worker's may differ. The
    message names fields, never values.
    """
    schema = getattr(channel, "binding_schema", None) or BUILTIN_BINDING_SCHEMAS.get(channel.name)
    if schema is None:
        return
    if not present and requires_binding(schema):
        raise ConfigError(f"agent {agent!r} has no {channel.name} binding")
    try:
        schema.model_validate(binding)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        detail = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(binding)'}: {e['msg']}" for e in errors
        )
        raise ConfigError(f"agents.{agent}.{channel.name}: {detail}") from None


def _must_wait(delivery_id: str, *, now: datetime) -> bool:
    """True when the row is pending and unclaimed but not due yet (paced, backing off)
    or not its turn under a provider rate limit; its queued message is then consumed
    (``enqueued_at`` cleared) and ``next_attempt_at`` says when to come back.

    A rate-limit turn is taken here, before the claim: losing the claim race
    afterwards wastes a turn (sending below the limit), never exceeds it.
    """
    row = Delivery.objects.filter(live_claim(), id=delivery_id, status=DeliveryStatus.PENDING)
    row = row.first()
    if row is None:
        return False  # sent, dead, held or being sent: the claim says "skipped"
    if row.next_attempt_at > now:
        _postpone(row, row.next_attempt_at)
        return True
    wait = _rate_wait(row)
    if wait <= 0:
        return False
    _postpone(row, now + timedelta(seconds=wait))
    return True


def _rate_wait(row: Delivery) -> float:
    """Seconds until ``row`` has its turn in every rate-limit scope of its channel (0: now).

    A binding that cannot be read (unknown channel or agent, a missing ``${VAR}``)
    has no turn to wait for: the send path holds the row with the reason.
    """
    try:
        channel = get_channel(row.channel)
        limits_of = getattr(channel, "rate_limits", None)
        if limits_of is None:
            return 0.0
        raw = (_agent_bindings(row.agent) or {}).get(row.channel, {})
        binding = expand_env(raw, secret_env(), path=f"agents.{row.agent}.{row.channel}")
        limits = list(limits_of(_message(row), binding))
    except Exception:
        return 0.0
    try:
        return ratelimit.acquire(get_redis(), row.channel, limits)
    except RedisError:
        log.warning(
            "delivery.rate_limit_unavailable id=%s channel=%s: waiting", row.id, row.channel
        )
        return RATE_LIMIT_UNAVAILABLE_WAIT


def _postpone(row: Delivery, until: datetime) -> None:
    Delivery.objects.filter(live_claim(), id=row.id, status=DeliveryStatus.PENDING).update(
        next_attempt_at=until, enqueued_at=None
    )


def _agent_bindings(agent: str) -> dict | None:
    """The agent's raw bindings, or None when no agent of that id is declared (any more)."""
    return Agent.objects.filter(agent_id=agent).values_list("bindings", flat=True).first()


def _held(row: Delivery, mine: Any, reason: str, *, now: datetime, secrets: frozenset[str]) -> str:
    """Keep the row for after the configuration is fixed; the attempt does not count."""
    message = storable_text(redact(reason[:2000], secrets))  # PostgreSQL refuses a NUL
    if not mine.update(
        status=DeliveryStatus.HELD,
        attempts=F("attempts") - 1,
        claimed_until=None,
        next_attempt_at=now + HOLD_RETRY,
        last_error=message,
    ):
        return claims.lost(row, "held")
    log.warning(
        "delivery.held id=%s job=%s channel=%s reason=%s: fix pollers.yaml or the worker's "
        "environment; held rows are retried after a reload",
        row.id,
        row.job_id,
        row.channel,
        message,
    )
    return "held"


def _failed(
    row: Delivery, mine: Any, exc: Exception, *, now: datetime, secrets: frozenset[str]
) -> str:
    message = storable_text(redact((str(exc) or type(exc).__name__)[:2000], secrets))
    permanent = classify(exc) is not ErrorClass.TRANSIENT or isinstance(exc, PermanentError)
    if permanent or row.attempts >= settings.NEXOPOLL_DELIVERY_MAX_ATTEMPTS:
        if not mine.update(status=DeliveryStatus.DEAD, claimed_until=None, last_error=message):
            return claims.lost(row, "dead")
        log.error(
            "delivery.dead id=%s job=%s channel=%s attempts=%s error=%s",
            row.id,
            row.job_id,
            row.channel,
            row.attempts,
            message,
        )
        return "dead"
    delay = backoff_delay(
        row.attempts,
        base=timedelta(seconds=settings.NEXOPOLL_DELIVERY_BASE_SECS),
        cap=timedelta(minutes=5),
    )
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        delay = max(delay, min(retry_after, timedelta(hours=1)))
    if not mine.update(next_attempt_at=now + delay, claimed_until=None, last_error=message):
        return claims.lost(row, "retry")
    log.warning(
        "delivery.retry id=%s job=%s channel=%s attempt=%s in=%ss error=%s",
        row.id,
        row.job_id,
        row.channel,
        row.attempts,
        delay.total_seconds(),
        message,
    )
    return "retry"


def due_rows(*, now: datetime, limit: int = 500) -> list[str]:
    """Pending rows the sweeper should (re-)send: due, unclaimed, past the grace period,
    and with no deliver message queued for them less than :func:`requeue_after` ago."""
    qs = (
        Delivery.objects.filter(
            live_claim(),
            Q(enqueued_at__isnull=True) | Q(enqueued_at__lt=Now() - requeue_after()),
            status=DeliveryStatus.PENDING,
            next_attempt_at__lte=now,
            created_at__lte=now - SWEEP_GRACE,
        )
        .order_by("next_attempt_at")
        .values_list("id", flat=True)[:limit]
    )
    return [str(i) for i in qs]


def requeue_after() -> timedelta:
    """How long a published deliver message is trusted to arrive before the sweeper
    queues its row again: past the broker's visibility timeout (an unacked message of
    a dead worker comes back by then), so only a message Redis lost is replaced."""
    vt = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("visibility_timeout", 3600)
    return timedelta(seconds=float(vt) + 60)


def requeue_soon(ids: list[str], *, now: datetime) -> tuple[list[str], float] | None:
    """Of ``ids``, the pending rows due within :data:`REQUEUE_WITHIN_SECS` and the
    countdown to the soonest of them; None when there are none. ``now`` is read from
    this process's clock (compared in the DB's)."""
    now = dbclock.to_db(now)
    due = list(
        Delivery.objects.filter(
            id__in=ids,
            status=DeliveryStatus.PENDING,
            next_attempt_at__lte=now + timedelta(seconds=REQUEUE_WITHIN_SECS),
        ).values_list("id", "next_attempt_at")
    )
    if not due:
        return None
    soonest = min(at for _, at in due)
    return [str(i) for i, _ in due], max((soonest - now).total_seconds(), 0.0)


def dead_letter_exhausted(*, now: datetime) -> int:
    """Dead-letter pending rows that used every attempt without an outcome (their worker died)."""
    n = Delivery.objects.filter(
        status=DeliveryStatus.PENDING,
        attempts__gte=settings.NEXOPOLL_DELIVERY_MAX_ATTEMPTS,
        claimed_until__lt=Now(),
    ).update(status=DeliveryStatus.DEAD, last_error="no outcome after the last attempt")
    if n:
        log.error("delivery.dead rows=%s: attempts exhausted without an outcome", n)
    return n
