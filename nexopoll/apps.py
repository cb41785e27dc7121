from django.apps import AppConfig
from django.conf import settings

from .net import options as net_options


def net_options_from_settings() -> net_options.NetOptions:
    """What ``nexopoll.net`` reads at every use (it imports no Django)."""
    return net_options.NetOptions(
        api_bases=settings.NEXOPOLL_API_BASES,
        pool_hosts=settings.NEXOPOLL_HTTP_POOL_HOSTS,
        pool_per_host=settings.NEXOPOLL_HTTP_POOL_PER_HOST,
    )


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

        net_options.use_options(net_options_from_settings)
        logredact.install()  # every log record of this process is redacted
        make_undumpable()  # no same-uid process (a plugin) reads our environ or memory
        stream.use_redis(get_redis)  # the stream channel adds to the runtime's Redis
