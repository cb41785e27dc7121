"""Reload from the admin: show the plan for pollers.yaml as it is on disk now, and
apply it only when the operator confirms the plan they saw (a digest of the file)."""

from __future__ import annotations

import hashlib

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from nexopoll import services
from nexopoll.services import permissions

from .refusals import shown


def _digest() -> str:
    path = services.config_path()
    data = path.read_bytes() if path.exists() else b""
    return hashlib.sha256(data).hexdigest()


def reload_view(model_admin):
    def view(request):
        if not permissions.allowed(request.user, permissions.RELOAD):
            raise PermissionDenied
        changelist = reverse("admin:admin_ext_job_changelist")
        digest = _digest()
        if request.method == "POST" and request.POST.get("post") == "yes":
            if request.POST.get("digest") != digest:
                model_admin.message_user(
                    request,
                    "pollers.yaml changed since the plan was shown: review it again.",
                    messages.WARNING,
                )
            else:
                with shown(model_admin, request, "reload refused: ") as outcome:
                    res = services.reload_config(now=timezone.now())
                if outcome.refused:
                    return HttpResponseRedirect(changelist)
                model_admin.log_change(request, _log_target(), f"reload: {_counts(res)}")
                model_admin.message_user(
                    request, f"Reload applied: {_counts(res)}.", messages.SUCCESS
                )
                return HttpResponseRedirect(changelist)
        error = ""
        plan = None
        try:
            plan = services.reload_config(now=timezone.now(), dry_run=True)
        except services.ServiceError as exc:  # shown on the page, not as a message
            error = str(exc)
        return TemplateResponse(
            request,
            "admin_ext/reload.html",
            {
                **model_admin.admin_site.each_context(request),
                "title": "Reload pollers.yaml",
                "plan": plan,
                "error": error,
                "digest": digest,
                "source": str(services.config_path()),
                "opts": model_admin.model._meta,
            },
        )

    return view


def _counts(res: services.ReloadResult) -> str:
    return (
        f"{len(res.add)} added, {len(res.replace)} replaced, {len(res.remove)} removed, "
        f"{len(res.keep)} kept, {len(res.issues)} rejected"
    )


def _log_target():
    """Admin-log entries need an object: a reload is logged against ``pollers.yaml``."""
    from .models import Job

    return Job(job_id="pollers.yaml")
