"""Redis Sentinel settings: from the environment to Celery's, RedBeat's and nexopoll's clients.

With ``NEXOPOLL_REDIS_SENTINELS=host:port,host:port`` and ``NEXOPOLL_REDIS_SENTINEL_MASTER``
every Redis client asks the sentinels for the current master (and asks again after a
failover): the broker (kombu's ``sentinel://`` transport), RedBeat (``redis-sentinel://``)
and ``runtime/redis.get_redis``. ``REDIS_URL`` then gives only the db number and the
master's user/password; ``NEXOPOLL_REDIS_SENTINEL_PASSWORD`` is the sentinels' own.
Only the settings (``nexopoll/settings/broker.py``) call this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

SENTINEL_SOCKET = {"socket_timeout": 5, "socket_connect_timeout": 5}


@dataclass(frozen=True)
class SentinelConf:
    sentinels: list[tuple[str, int]]
    master: str
    password: str = field(default="", repr=False)  # the sentinels' password
    db: int = 0
    username: str = ""
    master_password: str = field(default="", repr=False)

    def sentinel_kwargs(self) -> dict[str, Any]:
        """Options of the connections to the sentinels themselves."""
        return {**SENTINEL_SOCKET, **({"password": self.password} if self.password else {})}

    def master_kwargs(self) -> dict[str, Any]:
        """Options of the connections to the master (db and credentials from REDIS_URL)."""
        out: dict[str, Any] = {"db": self.db}
        if self.username:
            out["username"] = self.username
        if self.master_password:
            out["password"] = self.master_password
        return out


def parse_sentinels(raw: str) -> list[tuple[str, int]]:
    out = []
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        host, sep, port = part.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ImproperlyConfigured(
                f"NEXOPOLL_REDIS_SENTINELS: {part!r} must be host:port (a comma-separated list)"
            )
        out.append((host, int(port)))
    return out


def sentinel_conf(raw: str, master: str, password: str, redis_url: str) -> SentinelConf | None:
    """``None`` without sentinels; ImproperlyConfigured naming the variable when half set."""
    sentinels = parse_sentinels(raw)
    if not sentinels:
        if master:
            raise ImproperlyConfigured(
                "NEXOPOLL_REDIS_SENTINEL_MASTER is set but NEXOPOLL_REDIS_SENTINELS is empty"
            )
        return None
    if not master:
        raise ImproperlyConfigured(
            "NEXOPOLL_REDIS_SENTINELS is set: NEXOPOLL_REDIS_SENTINEL_MASTER (the monitored "
            "master's name) is required too"
        )
    url = urlsplit(redis_url)
    path = url.path.strip("/") or "0"
    if not path.isdigit():
        raise ImproperlyConfigured(f"REDIS_URL: the db number must be an integer, got {path!r}")
    return SentinelConf(
        sentinels=sentinels,
        master=master,
        password=password,
        db=int(path),
        username=unquote(url.username or ""),
        master_password=unquote(url.password or ""),
    )


def celery_overrides(conf: SentinelConf, transport_options: dict, redbeat_options: dict) -> dict:
    """The CELERY_* settings that point the broker and RedBeat at the sentinels."""
    auth = ""
    if conf.master_password or conf.username:
        auth = f"{quote(conf.username, safe='')}:{quote(conf.master_password, safe='')}@"
    broker = ";".join(f"sentinel://{auth}{_host(h)}:{p}/{conf.db}" for h, p in conf.sentinels)
    redbeat = {
        **redbeat_options,
        "sentinels": list(conf.sentinels),
        "service_name": conf.master,
        "sentinel_kwargs": conf.sentinel_kwargs(),
        **conf.master_kwargs(),
    }
    return {
        "CELERY_BROKER_URL": broker,
        "CELERY_BROKER_TRANSPORT_OPTIONS": {
            **transport_options,
            "master_name": conf.master,
            "sentinel_kwargs": conf.sentinel_kwargs(),
        },
        "CELERY_REDBEAT_REDIS_URL": "redis-sentinel://",
        "CELERY_REDBEAT_REDIS_OPTIONS": redbeat,
    }


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def ns(suffix: str) -> str:
    """``<NEXOPOLL_REDIS_PREFIX>:<suffix>``: the name of a key nexopoll writes (the
    prefix separates deployments sharing one Redis; default ``nexopoll``)."""
    return f"{settings.NEXOPOLL_REDIS_PREFIX}:{suffix}"


def key_prefix() -> str:
    """RedBeat's key prefix (its schedule, its entries, and the keys beside them)."""
    return settings.CELERY_REDBEAT_KEY_PREFIX


def kind_version_key(kind: str) -> str:
    """Bumped when a reload adds, changes or removes a job of ``kind``: a long-lived plugin
    restarts when the version of one of its kinds moved, and only then."""
    return key_prefix() + "nexopoll:kind-version:" + kind
