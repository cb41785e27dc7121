"""The admin site: Django's, with nexopoll's summary counts on the index page."""

from __future__ import annotations

from django.contrib import admin
from django.utils import timezone


class NexopollAdminSite(admin.AdminSite):
    site_header = "nexopoll"
    site_title = "nexopoll admin"
    index_title = "Operations"
    index_template = "admin_ext/index.html"

    def index(self, request, extra_context=None):
        from nexopoll.services import summary

        extra_context = {**(extra_context or {}), "nexopoll_summary": summary(now=timezone.now())}
        return super().index(request, extra_context)
