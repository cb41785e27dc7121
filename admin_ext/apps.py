from django.apps import AppConfig
from django.contrib.admin.apps import AdminConfig


class AdminExtConfig(AppConfig):
    """The operator views: job, outbox and reload admins (proxy models, permissions)."""

    name = "admin_ext"
    verbose_name = "nexopoll"
    default_auto_field = "django.db.models.BigAutoField"


class NexopollAdminConfig(AdminConfig):
    """``django.contrib.admin`` with the nexopoll site (summary counts on the index)."""

    default_site = "admin_ext.site.NexopollAdminSite"
