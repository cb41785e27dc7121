"""The outbox: deliveries by status, job and channel, with their errors, and a
*redeliver* action for dead or held rows (``admin_ext.redeliver``)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils import timezone

from nexopoll import services

from . import display
from .models import OutboxRow
from .readonly import RuntimeOwnedAdmin


@admin.register(OutboxRow)
class OutboxAdmin(RuntimeOwnedAdmin):
    list_display = (
        "id", "job_id", "purpose", "channel", "recipient", "status", "attempts",
        "next_attempt_at", "created_at", "sent_at", "error_col",
    )  # fmt: skip
    list_filter = ("status", "channel", "purpose")
    search_fields = ("=job_id", "=id")
    actions = ("redeliver",)
    readonly_fields = (
        "id", "job_id", "agent", "epoch", "purpose", "channel", "recipient", "payload", "status",
        "attempts", "next_attempt_at", "claimed_until", "last_error", "created_at", "sent_at",
    )  # fmt: skip

    def has_redeliver_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("admin_ext.redeliver")

    @admin.display(description="error")
    def error_col(self, row: OutboxRow) -> str:
        return display.truncate(row.last_error, 80)

    @admin.action(description="Redeliver selected dead or held rows", permissions=["redeliver"])
    def redeliver(self, request, queryset):  # type: ignore[no-untyped-def]
        rows = list(queryset)
        eligible = [r for r in rows if r.status in ("dead", "held")]
        skipped = len(rows) - len(eligible)
        if not eligible:
            self.message_user(
                request, "None of the selected rows is dead or held.", messages.WARNING
            )
            return
        try:
            moved = services.redeliver([str(r.id) for r in eligible], now=timezone.now())
        except (services.RedeliverRefused, services.UnknownDelivery) as exc:
            self.message_user(request, f"Nothing re-queued: {exc}", messages.ERROR)
            return
        for r in eligible:
            self.log_change(request, r, "redeliver")
        msg = f"Re-queued {len(moved)} row(s) under their own delivery ids."
        if skipped:
            msg += f" Skipped {skipped} row(s) that are neither dead nor held."
        self.message_user(request, msg, messages.SUCCESS)
