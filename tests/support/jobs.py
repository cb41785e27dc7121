"""pollers.yaml job entries for tests, every field a test does not name at its usual value."""

from __future__ import annotations


def webhook_poll_job(
    job_id: str,
    url: str,
    *,
    template: str = "{title}",
    channel: str = "log",
    failure_to: dict | None = None,
    **config,
) -> dict:
    """A ``webhook_poll`` job of agent ana, every 60 s: the list at ``items`` of ``url``
    (private addresses allowed, for loopback servers), each item as ``template`` to
    ``channel`` ``ops``; ``config`` adds or overrides config fields."""
    job = {
        "id": job_id,
        "kind": "webhook_poll",
        "agent": "ana",
        "schedule": {"every_secs": 60},
        "config": {
            "url": url,
            "items_path": "items",
            "message_template": template,
            "deliver": {"channel": channel, "to": "ops"},
            "allow_private_networks": True,
            **config,
        },
    }
    if failure_to is not None:
        job["failure_to"] = failure_to
    return job
