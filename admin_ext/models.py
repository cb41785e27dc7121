"""Proxy models for the admin: the YAML owns definitions, so these add no tables,
only the admin pages and the permissions to act on jobs and deliveries."""

from __future__ import annotations

from nexopoll.models import Delivery, PollJob


class Job(PollJob):
    class Meta:
        proxy = True
        verbose_name = "job"
        permissions = [
            ("operate_job", "Can pause, resume, reset, rewind, run and dry-run jobs"),
            ("reload_config", "Can apply a reload of pollers.yaml"),
        ]


class OutboxRow(Delivery):
    class Meta:
        proxy = True
        verbose_name = "delivery"
        verbose_name_plural = "deliveries"
        permissions = [("redeliver", "Can redeliver dead or held deliveries")]
