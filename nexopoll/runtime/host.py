"""The PollerHost a tick hands to its poller: it records, the commit sends.

What a poller hands it is checked as the config is (:mod:`nexopoll.core.hostcheck`):
a ``deliver`` recipient or a payload that could not be stored or sent is a
ConfigError naming the field, and one tick may make at most
``NEXOPOLL_MAX_DELIVERIES_PER_TICK`` deliveries (1,000): one more is a
PermanentError. Either is also remembered (``failure``): the tick fails with it,
nothing committed, even if the poller (or a plugin) caught it and returned.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from nexopoll.channels import binding_schemas, get_channel
from nexopoll.channels.stream import check_topic, publish_payload
from nexopoll.core.bindings import public_view
from nexopoll.core.config import expand_env
from nexopoll.core.errors import ConfigError, CredentialsMissingError, PermanentError, PollerError
from nexopoll.core.hostcheck import check_channel, check_json, check_recipient, printable
from nexopoll.core.redact import secret_values

from . import definitions, llm, logredact
from .metricstore import poller_key
from .registry import get_registry
from .secretenv import secret_env

log = logging.getLogger("nexopoll.poller")
DEFAULT_MAX_DELIVERIES_PER_TICK = 1000


def _max_deliveries() -> int:
    from django.conf import settings

    return getattr(settings, "NEXOPOLL_MAX_DELIVERIES_PER_TICK", DEFAULT_MAX_DELIVERIES_PER_TICK)


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
    max_deliveries: int = field(default_factory=_max_deliveries)
    # the first refused deliver/publish: the tick fails with it whatever the poller does
    failure: PollerError | None = None

    def deliver(self, channel: str, recipient: str, payload: dict[str, Any]) -> None:
        """Add a delivery to the tick's outbox (sent only once the tick commits).

        Raises:
            ConfigError: unknown channel, a recipient with a control character or
                over 500 characters, a payload that is not a JSON object.
            PermanentError: the tick's delivery cap is reached.
        """
        with self._refusal():
            self._count()
            check_channel(channel)
            get_channel(channel)  # unknown channel: ConfigError now, not a dead row later
            to = check_recipient(recipient)
            if not isinstance(payload, dict):
                raise ConfigError(
                    f"delivery payload must be a JSON object, got {type(payload).__name__}"
                )
            check_json(payload)
            self.deliveries.append(PendingDelivery(channel, to, payload))

    def publish(self, topic: str, payload: bytes) -> None:
        """Publish raw bytes to the Redis Stream ``topic`` through the ``stream`` channel:
        an outbox row like any delivery (sent after the commit, retried, deduplicated)."""
        with self._refusal():
            self._count()
            if not isinstance(topic, str):
                raise ConfigError(f"publish topic must be a string, got {type(topic).__name__}")
            if "stream" not in self.bindings:
                raise ConfigError(
                    f"publish needs a stream binding: agent {self.agent!r} has none "
                    f"(add agents.{self.agent}.stream: {{account: ...}})"
                )
            self.deliveries.append(
                PendingDelivery("stream", check_topic(topic), publish_payload(payload), "publish")
            )

    def _count(self) -> None:
        if len(self.deliveries) >= self.max_deliveries:
            raise PermanentError(
                f"the tick made more than {self.max_deliveries} deliveries "
                "(NEXOPOLL_MAX_DELIVERIES_PER_TICK); none was committed: deliver fewer "
                "items per tick (the rest on the next one) or raise the cap"
            )

    @contextmanager
    def _refusal(self) -> Iterator[None]:
        try:
            yield
        except PollerError as exc:
            if self.failure is None:
                self.failure = exc
            raise

    def raise_if_refused(self) -> None:
        """After the poller returned: a refused deliver/publish fails the tick."""
        if self.failure is not None:
            raise self.failure

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
        """One log line: control characters escaped, so no text forges another line."""
        lvl = logging.getLevelName(str(level).upper())
        clean = {printable(str(k), 64): printable(str(v), 500) for k, v in fields.items()}
        log.log(
            lvl if isinstance(lvl, int) else logging.INFO,
            "poller.log job=%s %s %s",
            self.job_id,
            printable(str(message), 2000),
            clean or "",
        )

    def metric_inc(self, name: str, /, **labels: Any) -> None:
        """Count ``name`` (``poller_metric_total{job_id, name, labels…}``), cluster-wide.

        Label values are masked like log lines (every ``${VAR}`` secret this process
        knows, the agent's bindings' included) and cut to 100 characters.

        Raises:
            ConfigError: an invalid metric or label name (``__name__``, ``le``, ``job``,
                ``1abc``…) or more than 5 labels (``nexopoll.core.metricrules``).
        """

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
