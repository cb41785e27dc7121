"""Changelist filters on a job's live state (it lives in ``poll_state``, keyed by job id)."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Q
from django.utils import timezone

from nexopoll.models import PollState


class _StateFilter(admin.SimpleListFilter):
    """Filter jobs by a condition on their state row (one ``IN (subquery)``)."""

    conds: dict[str, Q] = {}

    def lookups(self, request, model_admin):
        return [(key, key.replace("_", " ")) for key in self.conditions()]

    def queryset(self, request, queryset):
        cond = self.conditions().get(self.value() or "")
        if cond is None:
            return queryset
        return queryset.filter(job_id__in=PollState.objects.filter(cond).values("job_id"))

    def conditions(self) -> dict[str, Q]:
        return self.conds


class PausedFilter(_StateFilter):
    title = "paused"
    parameter_name = "paused"
    conds = {"yes": Q(paused=True), "no": Q(paused=False)}


class BreakerFilter(_StateFilter):
    title = "breaker"
    parameter_name = "breaker"

    def lookups(self, request, model_admin):
        return [("open", "open"), ("closed", "closed or half-open")]

    def conditions(self) -> dict[str, Q]:
        now = timezone.now()
        return {"open": Q(breaker_open_until__gt=now), "closed": ~Q(breaker_open_until__gt=now)}


class FailingFilter(_StateFilter):
    title = "health"
    parameter_name = "health"
    conds = {
        "failing": Q(last_status__in=["transient", "permanent"]) | Q(consecutive_errors__gt=0),
        "ok": Q(last_status="ok", consecutive_errors=0),
        "never_run": Q(last_status=""),
    }
