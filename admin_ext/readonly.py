"""The base of nexopoll's admins: rows are written by the runtime and pollers.yaml,
never by hand, so nobody adds, edits or deletes them here; actions act instead."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest


class RuntimeOwnedAdmin(admin.ModelAdmin):
    show_full_result_count = False  # no second COUNT(*) on filtered pages of big tables
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100

    class Media:
        css = {"all": ("admin_ext/nexopoll.css",)}  # one-line times and ids, badges

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False
