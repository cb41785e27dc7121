"""Job definitions (a mirror of pollers.yaml), job state, agents and the outbox.

The YAML is the source of truth for definitions; the DB mirrors it and owns the
state. ``PollState`` is keyed by job id, a relation to ``PollJob`` without a database
constraint (``job``, column ``job_id``), so removing a job from the YAML keeps its
cursor (adding it back resumes where it stopped) while ``select_related("state")`` and
``filter(state__paused=True)`` work.

The permissions the front-ends check are declared here, on nexopoll's own models
(``nexopoll.view_polljob``, ``nexopoll.operate_job``, ``nexopoll.reload_config``,
``nexopoll.view_delivery``, ``nexopoll.redeliver``: see :mod:`nexopoll.permissions`), so the
API and the LLM tools do not depend on ``admin_ext`` being installed.
"""

from __future__ import annotations

import uuid

from django.db import models

from nexopoll.core.limits import (
    MAX_AGENT_ID,
    MAX_CHANNEL,
    MAX_HASH,
    MAX_JOB_ID,
    MAX_KIND,
    MAX_RECIPIENT,
    MAX_STATUS,
)


class TickStatus(models.TextChoices):
    OK = "ok"
    TRANSIENT = "transient"
    PERMANENT = "permanent"
    SKIPPED = "skipped"


class PollJob(models.Model):
    job_id = models.CharField(primary_key=True, max_length=MAX_JOB_ID)
    kind = models.CharField(max_length=MAX_KIND)
    agent = models.CharField(max_length=MAX_AGENT_ID)
    schedule = models.JSONField(help_text="every_secs | cron + tz | at")
    jitter_ms = models.IntegerField(default=0)
    config = models.JSONField(default=dict, help_text="as written: ${VAR} references unexpanded")
    failure_to = models.JSONField(null=True, blank=True)
    paused_on_boot = models.BooleanField(default=False)
    breaker_threshold = models.IntegerField(default=5)
    alert_cooldown_secs = models.IntegerField(default=3600)
    lease_ttl_factor = models.FloatField(default=2.0)
    # per-job override of the per-host politeness caps ({"in_flight": n, "per_sec": n})
    host_limits = models.JSONField(null=True, blank=True)
    definition_hash = models.CharField(max_length=MAX_HASH)
    source_line = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "poll_job"
        ordering = ["job_id"]
        verbose_name = "poll job"
        permissions = [
            ("operate_job", "Can pause, resume, reset, rewind, run and dry-run jobs"),
            ("reload_config", "Can apply a reload of pollers.yaml"),
        ]

    def __str__(self) -> str:
        return self.job_id


class PollState(models.Model):
    # the job's id (column ``job_id``); no constraint: the state outlives its job's removal
    job = models.OneToOneField(
        PollJob,
        primary_key=True,
        db_constraint=False,
        on_delete=models.DO_NOTHING,
        related_name="state",
        db_column="job_id",
    )
    # Fencing epoch (the row's version): every write to the row moves it, a tick's commit
    # only WHERE epoch = the version it read; every other writer uses store.write_state.
    epoch = models.BigIntegerField(default=0)
    definition_hash = models.CharField(max_length=MAX_HASH, default="")
    cursor = models.BinaryField(null=True, blank=True)
    paused = models.BooleanField(default=False)
    paused_reason = models.TextField(blank=True, default="")
    # who paused it: operator | boot (paused_on_boot) | error (a permanent or config
    # error: a reload that changes the definition resumes it) | schedule (a one-shot fired)
    paused_by = models.CharField(max_length=16, blank=True, default="")
    consecutive_errors = models.IntegerField(default=0)
    breaker_open_until = models.DateTimeField(null=True, blank=True)
    breaker_trips = models.IntegerField(default=0)
    breaker_trial_at = models.DateTimeField(null=True, blank=True)
    running_since = models.DateTimeField(null=True, blank=True)
    crash_count = models.IntegerField(default=0)
    last_started_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_status = models.CharField(max_length=MAX_STATUS, choices=TickStatus.choices, blank=True)
    last_error = models.TextField(blank=True, default="")
    # what a poller's tick asked operators to know (TickAck.notice), e.g. an automatic
    # re-baseline that skipped changes; shown beside last_error, masked
    notice = models.TextField(blank=True, default="")
    notice_at = models.DateTimeField(null=True, blank=True)
    last_latency_ms = models.IntegerField(null=True, blank=True)
    next_run_at = models.DateTimeField(null=True, blank=True)
    ticks_total = models.BigIntegerField(default=0)
    items_seen_total = models.BigIntegerField(default=0)
    items_dispatched_total = models.BigIntegerField(default=0)
    last_failure_alert_at = models.DateTimeField(null=True, blank=True)
    alert_active = models.BooleanField(default=False)
    updated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "poll_state"
        ordering = ["job_id"]
        verbose_name = "poll state"

    def __str__(self) -> str:
        return self.job_id


class Agent(models.Model):
    agent_id = models.CharField(primary_key=True, max_length=MAX_AGENT_ID)
    bindings = models.JSONField(default=dict, help_text="channel → binding; secrets as ${VAR}")

    class Meta:
        db_table = "poll_agent"
        ordering = ["agent_id"]

    def __str__(self) -> str:
        return self.agent_id


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    SENT = "sent"
    DEAD = "dead"
    # a configuration problem at send time (unknown channel or agent binding, a
    # missing ${VAR}): kept, not dead-lettered; retried after a reload or periodically
    HELD = "held"


class Delivery(models.Model):
    """One outbound message, written in the same transaction as the tick's cursor.

    The row id is the idempotency key receivers see (``X-Nexopoll-Delivery-Id``).
    ``claimed_until`` is set and compared with the DB's clock, never a worker's;
    ``enqueued_at`` (DB clock too) is when a deliver message for the row was last
    published and not yet taken, so the sweeper does not queue it again.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    job_id = models.CharField(max_length=MAX_JOB_ID, db_index=True)
    agent = models.CharField(max_length=MAX_AGENT_ID)
    epoch = models.BigIntegerField()
    purpose = models.CharField(max_length=MAX_STATUS, default="item")  # item | alert | recovery
    channel = models.CharField(max_length=MAX_CHANNEL)
    recipient = models.CharField(max_length=MAX_RECIPIENT)
    payload = models.JSONField()
    status = models.CharField(
        max_length=MAX_STATUS, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.IntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    claimed_until = models.DateTimeField(null=True, blank=True)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "poll_outbox"
        ordering = ["created_at"]
        verbose_name_plural = "deliveries"
        permissions = [("redeliver", "Can redeliver dead or held deliveries")]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="outbox_due")]

    def __str__(self) -> str:
        return f"{self.channel}:{self.recipient} ({self.status})"
