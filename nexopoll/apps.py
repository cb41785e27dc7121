from django.apps import AppConfig


class NexopollConfig(AppConfig):
    name = "nexopoll"
    verbose_name = "nexopoll"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers system checks)
