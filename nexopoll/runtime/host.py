"""The PollerHost a tick hands to its poller: it records, the commit sends."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nexopoll.channels import binding_schemas, get_channel
from nexopoll.channels.stream import check_topic, publish_payload
from nexopoll.core.bindings import public_view
from nexopoll.core.config import expand_env
from nexopoll.core.errors import ConfigError, CredentialsMissingError
from nexopoll.core.redact import secret_values

from . import logredact
from .secretenv import secret_env

log = logging.getLogger("nexopoll.poller")


@dataclass(frozen=True)
class PendingDelivery:
    channel: str
    recipient: str
    payload: dict[str, Any]
    purpose: str = "item"


@dataclass
class TickHost:
    """Collects deliveries for the tick's commit; nothing leaves before it commits."""

    job_id: str
    agent: str
    bindings: dict[str, Any]
    env: Any
    deliveries: list[PendingDelivery] = field(default_factory=list)
    post_commit: list[Callable[[], None]] = field(default_factory=list)
    # metric_inc counts, written with the tick's metrics (poller_metric_total)
    metric_counts: dict[tuple[str, tuple], int] = field(default_factory=dict)
    _secrets_known: bool = field(default=False, repr=False)  # the bindings' masked in metrics

    def deliver(self, channel: str, recipient: str, payload: dict[str, Any]) -> None:
        get_channel(channel)  # unknown channel: ConfigError now, not a dead row later
        if not isinstance(payload, dict):
            raise ConfigError(
                f"delivery payload must be a JSON object, got {type(payload).__name__}"
            )
        self.deliveries.append(PendingDelivery(channel, str(recipient), payload))

    def publish(self, topic: str, payload: bytes) -> None:
        """Publish raw bytes to the Redis Stream ``topic`` through the ``stream`` channel:
        an outbox row like any delivery (sent after the commit, retried, deduplicated)."""
        if "stream" not in self.bindings:
            raise ConfigError(
                f"publish needs a stream binding: agent {self.agent!r} has none "
                f"(add agents.{self.agent}.stream: {{account: ...}})"
            )
        self.deliveries.append(
            PendingDelivery("stream", check_topic(topic), publish_payload(payload), "publish")
        )

    def credentials_get(self, channel: str) -> dict[str, Any]:
        """The agent's binding for ``channel``, ``${...}`` expanded.

        For an installed channel (telegram, slack…) the secrets are left out: the
        channel itself resolves them when it sends. A binding for something that is
        no channel (``google``: a poller's own source credentials) is returned whole.
        """
        binding = self.bindings.get(channel)
        if binding is None:
            raise CredentialsMissingError(f"agent {self.agent!r} has no {channel!r} binding")
        schemas = binding_schemas()
        if channel in schemas:
            binding = public_view(binding, schemas[channel])
        return expand_env(binding, self.env, path=f"agents.{self.agent}.{channel}")

    def log(self, level: str, message: str, **fields: Any) -> None:
        lvl = logging.getLevelName(level.upper())
        log.log(
            lvl if isinstance(lvl, int) else logging.INFO,
            "poller.log job=%s %s %s",
            self.job_id,
            message,
            fields or "",
        )

    def metric_inc(self, name: str, /, **labels: Any) -> None:
        """Count ``name`` (``poller_metric_total{job_id, name, labels…}``), cluster-wide.

        Label values are masked like log lines (every ``${VAR}`` secret this process
        knows, the agent's bindings' included) and cut to 100 characters.

        Raises:
            ConfigError: an invalid metric or label name (``__name__``, ``le``, ``job``,
                ``1abc``…) or more than 5 labels (``nexopoll.core.metricrules``).
        """
        from .metricstore import poller_key

        if not self._secrets_known:  # a tick registered them already; a tool call may not
            logredact.register(secret_values(self.bindings, self.env))
            self._secrets_known = True
        try:
            key = poller_key(name, labels, logredact.known())
        except ConfigError as exc:
            raise ConfigError(f"job {self.job_id!r}: {exc}") from None
        self.metric_counts[key] = self.metric_counts.get(key, 0) + 1
        log.debug("poller.metric job=%s %s %s", self.job_id, key[0], dict(key[1]))

    def llm_invoke(self, request: dict[str, Any]) -> dict[str, Any]:
        from django.conf import settings

        from . import llm

        providers = llm.load_settings(settings.NEXOPOLL_CONFIG, self.env)
        return llm.invoke(request, settings=providers, env=self.env)

    def after_commit(self, callback: Callable[[], None]) -> None:
        self.post_commit.append(callback)


def run_after_commit(job_id: str, callbacks: list[Callable[[], None]]) -> None:
    """Run a committed tick's side effects in order; a failure is logged and the rest still run."""
    for callback in callbacks:
        try:
            callback()
        except Exception:
            log.warning("tick.after_commit_failed job=%s", job_id, exc_info=True)


def call_job_tool(job_id: str, tool: str, args: dict[str, Any]) -> Any:
    """Run a poller's custom tool (``Poller.custom_tools``) for one job: no tick, no state.

    The handler gets ``args`` plus ``args["job"] = {"config", "credentials"}``: the
    job's expanded config and its agent's expanded bindings.

    Raises:
        ConfigError: unknown job, or the job's kind has no such tool.
    """
    from . import definitions
    from .registry import get_registry

    jobs = definitions.load_all([job_id])
    if not jobs:
        raise ConfigError(f"unknown job {job_id!r}")
    job = jobs[0]
    poller = get_registry().get(job.kind)
    spec = next((t for t in poller.custom_tools() if t.name == tool), None)
    if spec is None:
        raise ConfigError(f"kind {job.kind!r} has no tool {tool!r}")
    host = TickHost(job.job_id, job.agent, job.agent_bindings, secret_env())
    credentials = {name: host.credentials_get(name) for name in job.agent_bindings}
    context = {"config": job.expanded_config(secret_env()), "credentials": credentials}
    return spec.handler({**args, "job_id": job_id, "job": context})
