"""The outbox: deliveries by status, job and channel, newest first, with their errors,
and a *redeliver* action for dead or held rows (``admin_ext.redeliver``).

Ids are shown short (8 hex digits, the full one on hover and on the row's page) and
times as ``2026-11-26 14:18:03 UTC``, through the helpers in :mod:`.display`."""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html

from nexopoll import services
from nexopoll.services import permissions

from . import display
from .models import OutboxRow
from .readonly import RuntimeOwnedAdmin
from .refusals import shown


@admin.register(OutboxRow)
class OutboxAdmin(RuntimeOwnedAdmin):
    list_display = (
        "id_col",
        "job_col",
        "purpose",
        "channel",
        "recipient_col",
        "status",
        "attempts",
        "next_attempt_col",
        "created_col",
        "sent_col",
        "error_col",
    )
    list_display_links = ("id_col",)
    change_list_template = "admin_ext/outbox_changelist.html"
    list_filter = ("status", "channel", "purpose")
    ordering = ("-created_at", "-id")  # newest first, as the CLI, the API and the job page
    search_fields = ("=job_id", "=id")
    actions = ("redeliver",)
    readonly_fields = (
        "id",
        "job_col",
        "agent",
        "epoch",
        "purpose",
        "channel",
        "recipient",
        "payload",
        "status",
        "attempts",
        "next_attempt_at_",
        "claimed_until_",
        "enqueued_at_",
        "last_error",
        "created_col",
        "sent_col",
    )
    fields = readonly_fields  # only these: the model's own time fields would read "2:18 p.m."

    def get_search_results(self, request, queryset, search_term):
        """A short id as the list shows it (hex digits, 4 or more) finds its rows too."""
        found, dups = super().get_search_results(request, queryset, search_term)
        term = search_term.strip().replace("-", "").lower()
        if 4 <= len(term) < 32 and all(c in "0123456789abcdef" for c in term):
            found |= queryset.filter(id__startswith=term)
        return found, dups

    @admin.display(description="id", ordering="id")
    def id_col(self, row: OutboxRow) -> str:
        short = display.short_id(row.id)
        return format_html('<code class="np-id" title="{}">{}</code>', row.id, short)

    @admin.display(description="job", ordering="job_id")
    def job_col(self, row: OutboxRow) -> str:
        return format_html('<a href="{}">{}</a>', display.job_url(row.job_id), row.job_id)

    @admin.display(description="to", ordering="recipient")
    def recipient_col(self, row: OutboxRow) -> str:
        to = row.recipient
        return format_html('<span class="np-cut" title="{}">{}</span>', to, to)

    # times in UTC to the second, as the CLI and the API give them
    @admin.display(description="created", ordering="created_at")
    def created_col(self, row: OutboxRow) -> str:
        return display.when(row.created_at)

    @admin.display(description="next attempt", ordering="next_attempt_at")
    def next_attempt_col(self, row: OutboxRow) -> str:
        if row.status not in ("pending", "held"):
            return "-"
        return display.when(row.next_attempt_at)

    @admin.display(description="sent", ordering="sent_at")
    def sent_col(self, row: OutboxRow) -> str:
        return display.when(row.sent_at)

    # the row's page also shows these
    @admin.display(description="next attempt")
    def next_attempt_at_(self, row: OutboxRow) -> str:
        return display.when(row.next_attempt_at)

    @admin.display(description="claimed until")
    def claimed_until_(self, row: OutboxRow) -> str:
        return display.when(row.claimed_until)

    @admin.display(description="enqueued")
    def enqueued_at_(self, row: OutboxRow) -> str:
        return display.when(row.enqueued_at)

    def has_redeliver_permission(self, request: HttpRequest) -> bool:
        return permissions.allowed(request.user, permissions.REDELIVER)

    @admin.display(description="error")
    def error_col(self, row: OutboxRow) -> str:
        text = display.truncate(row.last_error, 80)
        return format_html('<span class="np-err" title="{}">{}</span>', row.last_error[:1000], text)

    @admin.action(description="Redeliver selected dead or held rows", permissions=["redeliver"])
    def redeliver(self, request, queryset):
        rows = list(queryset)
        eligible = [r for r in rows if r.status in ("dead", "held")]
        skipped = len(rows) - len(eligible)
        if not eligible:
            self.message_user(
                request, "None of the selected rows is dead or held.", messages.WARNING
            )
            return
        with shown(self, request, "Nothing re-queued: ") as outcome:
            moved = services.redeliver([str(r.id) for r in eligible], now=timezone.now())
        if outcome.refused:
            return
        for r in eligible:
            self.log_change(request, r, "redeliver")
        listed = display.id_list([display.short_id(i) for i in moved])
        msg = f"Re-queued {len(moved)} row(s) under their own delivery ids: {listed}."
        if skipped:
            msg += f" Skipped {skipped} row(s) that are neither dead nor held."
        self.message_user(request, msg, messages.SUCCESS)
