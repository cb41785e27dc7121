"""Redis key names shared by beat, the RedBeat sync and the tick (RedBeat's own layout)."""

from __future__ import annotations

from nexopoll import redisconf

ENTRY_PREFIX = "job:"


ns = redisconf.ns  # <NEXOPOLL_REDIS_PREFIX>:<suffix>, shared with the channels


key_prefix = redisconf.key_prefix


def schedule_key() -> str:
    return key_prefix() + ":schedule"


def entry_name(job_id: str) -> str:
    return ENTRY_PREFIX + job_id


def entry_key(job_id: str) -> str:
    return key_prefix() + entry_name(job_id)


def hashes_key() -> str:
    """Hash job_id → definition hash of the entry installed in RedBeat."""
    return key_prefix() + "nexopoll:hashes"


def version_key() -> str:
    """Bumped on every entry write so beat drops its decoded-entry cache."""
    return key_prefix() + "nexopoll:version"


kind_version_key = redisconf.kind_version_key  # read by the plugins too


def synced_key() -> str:
    """Present while the entries mirror the DB; its absence (a flush) triggers a resync."""
    return key_prefix() + "nexopoll:synced"


def heartbeat_key() -> str:
    """``"<unix time>:<pid>"`` of the lock-holding beat's last loop (read by /healthz)."""
    return key_prefix() + "nexopoll:beat-heartbeat"


def slow_key() -> str:
    """Set of jobs whose last tick waited longer than ``NEXOPOLL_BATCH_SLOW_MS`` (on the
    network, mostly): beat batches them apart from the quick ones, each tick keeps it
    current."""
    return key_prefix() + "nexopoll:slow"
