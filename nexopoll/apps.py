from django.apps import AppConfig


class NexopollConfig(AppConfig):
    name = "nexopoll"
    verbose_name = "nexopoll"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import celery, checks  # noqa: F401  (the Celery app for shared_task; checks)
        from .channels import stream
        from .hardening import make_undumpable
        from .runtime import logredact, workerhooks  # noqa: F401  (connects Celery signals)
        from .runtime.redis import get_redis

        logredact.install()  # every log record of this process is redacted
        make_undumpable()  # no same-uid process (a plugin) reads our environ or memory
        stream.use_redis(get_redis)  # the stream channel adds to the runtime's Redis
