"""The jobs admin: live state, actions through the service layer, a job's page.

pollers.yaml owns definitions: nobody adds, edits or deletes a job here. Staff
with ``view_job`` can look; acting needs ``nexopoll.operate_job`` (or the admin's
``admin_ext.operate_job``). Every action goes through :mod:`nexopoll.services` (the
CLI's verbs) and is written to Django's admin log.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path
from django.utils import timezone
from django.utils.html import format_html

from nexopoll import services
from nexopoll.models import Delivery, PollState
from nexopoll.services import permissions

from . import display
from .filters import BreakerFilter, FailingFilter, PausedFilter
from .models import Job
from .outbox_admin import OutboxAdmin  # noqa: F401  (registers the deliveries admin)
from .readonly import RuntimeOwnedAdmin
from .refusals import shown
from .reload_view import reload_view


def _newest_deliveries(job_id: str, n: int = 50) -> list[Delivery]:
    """The job page's deliveries, newest first, with short ids and UTC times as the list."""
    rows = list(Delivery.objects.filter(job_id=job_id).order_by("-created_at", "-id")[:n])
    for d in rows:
        d.short_id = display.short_id(d.id)
        d.created = display.stamp(d.created_at)
    return rows


@admin.register(Job)
class JobAdmin(RuntimeOwnedAdmin):
    list_display = (
        "job_id",
        "kind",
        "agent",
        "schedule_col",
        "paused_col",
        "status_col",
        "error_col",
        "last_run_col",
        "next_run_col",
        "seen_col",
        "dispatched_col",
    )
    list_filter = (PausedFilter, BreakerFilter, FailingFilter, "kind", "agent")
    search_fields = ("job_id",)
    actions = ("pause", "resume", "reset", "run_now", "dry_run")
    change_form_template = "admin_ext/job_detail.html"
    change_list_template = "admin_ext/job_changelist.html"

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return permissions.allowed(request.user, permissions.OPERATE)

    # --- live state: joined to the page's jobs (PollState.job, no hand join) -----------
    def get_queryset(self, request: HttpRequest):
        return super().get_queryset(request).select_related("state")

    def _st(self, job) -> PollState | None:
        return getattr(job, "state", None)  # a job without a state row yet: None

    @admin.display(description="schedule")
    def schedule_col(self, job: Job) -> str:
        return display.schedule_cell(job.schedule)

    @admin.display(description="paused")
    def paused_col(self, job: Job) -> str:
        st = self._st(job)
        return display.paused_label(bool(st and st.paused), st.paused_reason if st else "")

    @admin.display(description="last status")
    def status_col(self, job: Job) -> str:
        """The status badge, then the error streak (``x3``) and the breaker when not closed."""
        st = self._st(job)
        status = (st.last_status if st else "") or "never"
        streak = f" \u00d7{st.consecutive_errors}" if st and st.consecutive_errors else ""
        breaker = services.breaker_label(st.breaker_open_until if st else None, timezone.now())
        return format_html(
            '<span class="np-badge np-{}">{}</span>{} {}',
            status,
            status,
            streak,
            ""
            if breaker == "closed"
            else format_html(
                '<span class="np-badge np-breaker" title="breaker {}">breaker {}</span>',
                breaker,
                "open" if breaker == "open" else "½",
            ),
        )

    @admin.display(description="last error")
    def error_col(self, job: Job) -> str:
        st = self._st(job)
        # the rule of every surface (stored masked; the job's own ${VAR}s again, no query)
        text = services.masking.masked(st.last_error, [job], agents=False) if st else ""
        if st is not None and st.notice:  # what the poller asked operators to know
            at = f" {st.notice_at:%Y-%m-%d %H:%M} UTC" if st.notice_at else ""
            note = f"notice{at}: {st.notice}"
            text = f"{text} | {note}" if text else note
        return format_html(
            '<span class="np-err" title="{}">{}</span>', text[:1000], display.truncate(text, 60)
        )

    @admin.display(description="last run")
    def last_run_col(self, job: Job):
        st = self._st(job)
        return display.when(st.last_run_at if st else None, display.job_zone(job.schedule), False)

    @admin.display(description="next run")
    def next_run_col(self, job: Job):
        st = self._st(job)
        if st is not None and st.paused:
            return "paused"  # no next run until resumed (then: its next slot)
        nxt = services.next_run(job, st, now=timezone.now())
        return display.when(nxt, display.job_zone(job.schedule), False)

    @admin.display(description="seen")
    def seen_col(self, job: Job) -> int:
        st = self._st(job)
        return st.items_seen_total if st else 0

    @admin.display(description="dispatched")
    def dispatched_col(self, job: Job) -> int:
        st = self._st(job)
        return st.items_dispatched_total if st else 0

    # --- actions --------------------------------------------------------------------
    def _each(self, request, queryset, verb, fn) -> list[str]:
        """Apply ``fn`` to each selected job; the ids it was applied to, for the message."""
        done = []
        for job in queryset:
            with shown(self, request) as outcome:
                fn(job.job_id)
            if outcome.refused:
                continue
            self.log_change(request, job, f"{verb} (nexopoll admin)")
            done.append(job.job_id)
        return done

    def _done(self, request, past: str, ids: list[str], tail: str = "") -> None:
        if ids:
            self.message_user(request, f"{past} {display.id_list(ids)}{tail}.", messages.SUCCESS)

    @admin.action(description="Pause selected jobs", permissions=["operate"])
    def pause(self, request, queryset):
        ids = self._each(
            request,
            queryset,
            "pause",
            lambda j: services.pause_job(j, reason=f"paused by {request.user.get_username()}"),
        )
        self._done(request, "Paused", ids)

    @admin.action(description="Resume selected jobs", permissions=["operate"])
    def resume(self, request, queryset):
        self._done(request, "Resumed", self._each(request, queryset, "resume", services.resume_job))

    @admin.action(description="Reset selected jobs (clears cursors)…", permissions=["operate"])
    def reset(self, request, queryset):
        if request.POST.get("post") == "yes":
            ids = self._each(request, queryset, "reset", services.reset_job)
            self._done(request, "Reset", ids, ": cursors cleared")
            return None
        states = PollState.objects.in_bulk([j.job_id for j in queryset])
        rows = [
            (
                job,
                *services.cursor_pretty(
                    states[job.job_id].cursor if job.job_id in states else None
                ),
            )
            for job in queryset
        ]
        return TemplateResponse(
            request,
            "admin_ext/reset_confirm.html",
            {
                **self.admin_site.each_context(request),
                "title": "Reset jobs: clear their cursors?",
                "rows": rows,
                "queryset": queryset,
                "opts": self.model._meta,
                "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            },
        )

    @admin.action(description="Run selected jobs now", permissions=["operate"])
    def run_now(self, request, queryset):
        queued = []
        for job in queryset:
            task_id = services.run_now_async(job.job_id)
            self.log_change(request, job, f"run now (task {task_id})")
            queued.append((job.job_id, task_id))
        if len(queued) == 1:  # "Job …" first: Django capitalises a message's first letter
            job_id, task_id = queued[0]
            msg = f"Job {job_id}: run queued as task {task_id}; see the job's page."
        else:
            ids = display.id_list([job_id for job_id, _ in queued])
            msg = f"Runs queued for {ids}; each job's page shows its result."
        self.message_user(request, msg, messages.SUCCESS)

    @admin.action(description="Dry run selected jobs (commits nothing)", permissions=["operate"])
    def dry_run(self, request, queryset):
        jobs = list(queryset[:10])
        results = _dry_runs([job.job_id for job in jobs])
        results = [(job, results[job.job_id]) for job in jobs]
        return TemplateResponse(
            request,
            "admin_ext/dry_run.html",
            {
                **self.admin_site.each_context(request),
                "title": "Dry run",
                "results": results,
                "opts": self.model._meta,
            },
        )

    # --- a job's page and its buttons ----------------------------------------------
    def get_urls(self):
        wrap = self.admin_site.admin_view
        mine = [
            path("reload/", wrap(reload_view(self)), name="admin_ext_job_reload"),
            path("<path:object_id>/do/<str:verb>/", wrap(self.job_verb), name="admin_ext_job_verb"),
            path(
                "<path:object_id>/rewind/<int:tick>/",
                wrap(self.rewind_view),
                name="admin_ext_job_rewind",
            ),
        ]
        return mine + super().get_urls()

    def change_view(self, request, object_id, form_url="", extra_context=None):
        job = self.get_object(request, unquote(object_id))  # ids in admin URLs are quote()d
        if job is None or not self.has_view_permission(request, job):
            return super().change_view(request, object_id, form_url, extra_context)
        now = timezone.now()
        state = PollState.objects.filter(job_id=job.job_id).first()
        entries = services.tick_history(job.job_id)
        fmt, cursor = services.cursor_pretty(state.cursor if state else None)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Job {job.job_id}",
            "job": job,
            "state": state,
            "opts": self.model._meta,
            "original": job,
            "zone": display.job_zone(job.schedule),
            "schedule_words": display.schedule_words(job.schedule),
            "breaker": services.breaker_label(state.breaker_open_until if state else None, now),
            "definition": services.definition_yaml(job),
            "source": services.definition_source(job),
            "cursor_format": fmt,
            "cursor_text": cursor,
            "history": entries,
            "strip": display.tick_strip(entries),
            "host_wait": display.host_wait_note(
                services.host_wait(job.job_id), display.job_zone(job.schedule)
            ),
            "deliveries": _newest_deliveries(job.job_id),
            "preview": services.preview_job(job.job_id, now=now, count=10),
            "runs": services.run_now_results(job.job_id),
            "can_operate": self.has_operate_permission(request),
        }
        return TemplateResponse(request, self.change_form_template, context)

    def _job_or_404(self, request, object_id):
        job = self.get_object(request, unquote(object_id))
        if job is None:
            raise Http404(f"no job {unquote(object_id)!r}")
        if request.method != "POST" or not self.has_operate_permission(request):
            raise PermissionDenied
        return job

    def job_verb(self, request, object_id, verb):
        job = self._job_or_404(request, object_id)
        back = display.job_url(job.job_id)
        if verb == "dry-run":
            return self.dry_run(request, Job.objects.filter(job_id=job.job_id))
        if verb == "reset":
            return self.reset(
                request, Job.objects.filter(job_id=job.job_id)
            ) or HttpResponseRedirect(back)
        verbs = {"pause": self.pause, "resume": self.resume, "run": self.run_now}
        if verb not in verbs:
            raise PermissionDenied
        verbs[verb](request, Job.objects.filter(job_id=job.job_id))
        return HttpResponseRedirect(back)

    def rewind_view(self, request, object_id, tick):
        job = self.get_object(request, unquote(object_id))
        if job is None or not self.has_operate_permission(request):
            raise PermissionDenied
        back = display.job_url(job.job_id)
        entry = next((e for e in services.tick_history(job.job_id) if e.n == tick), None)
        if request.method == "POST" and request.POST.get("post") == "yes":
            with shown(self, request) as outcome:
                services.rewind_job(job.job_id, tick=tick, actor=request.user.get_username())
            if outcome.refused:
                return HttpResponseRedirect(back)
            self.log_change(request, job, f"rewind to tick {tick}")
            self.message_user(
                request, f"Job {job.job_id}: cursor rewound to tick #{tick}.", messages.SUCCESS
            )
            return HttpResponseRedirect(back)
        return TemplateResponse(
            request,
            "admin_ext/rewind_confirm.html",
            {
                **self.admin_site.each_context(request),
                "title": f"Rewind {job.job_id}?",
                "job": job,
                "entry": entry,
                "tick": tick,
                "opts": self.model._meta,
            },
        )


def _dry_runs(job_ids: list[str]) -> dict[str, dict]:
    """Dry runs on workers (never in the web process), waited for together up to
    ``NEXOPOLL_RUN_WAIT_SECS``; one still going is shown as running, with its status URL."""
    tasks: dict[str, str] = {}
    out: dict[str, dict] = {}
    for job_id in job_ids:
        try:
            tasks[job_id] = services.runs.start(job_id, dry_run=True)
        except Exception as exc:  # shown on the page, like the CLI prints it
            out[job_id] = {"error": str(exc)}
    deadline = time.monotonic() + settings.NEXOPOLL_RUN_WAIT_SECS
    for job_id, task_id in tasks.items():
        outcome = services.runs.wait(task_id, timeout=max(deadline - time.monotonic(), 0.001))
        if outcome is None:
            url = display.job_url(job_id)
            out[job_id] = {
                "running": True,
                "task_id": task_id,
                "job_url": url,
                "status_url": f"/api/pollers/{job_id}/runs/{task_id}",
            }
        else:
            out[job_id] = _dry_view(outcome)
    return out


def _dry_view(outcome: dict) -> dict:
    tick = outcome.get("tick")
    if not isinstance(tick, dict):
        return {"status": outcome.get("status"), "error": outcome.get("error") or "failed"}
    text = tick.get("next_cursor")
    fmt, cursor = services.cursor_pretty(None if text is None else str(text).encode())
    return {
        "status": tick["status"],
        "error": tick["error"],
        "deliveries": tick["deliveries"],
        "cursor_format": fmt,
        "cursor_text": cursor,
        "items_seen": tick["items_seen"],
        "cursor_unchanged": text is None,
    }
