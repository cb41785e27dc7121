"""The ``agents:`` block: agent ids and their channel bindings (pure).

A binding's secret-named keys (see :func:`~nexopoll.core.envrefs.is_secret_key`)
must be exactly one ``${VAR}`` reference; every reference must name a set
variable. A bad agent is an issue that rejects the agent (and the jobs that name
it), never the whole file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from ..bindings import (
    BUILTIN_BINDING_SCHEMAS,
    BindingSchemas,
    generic_binding_problems,
    is_secret_field,
)
from ..envrefs import (
    SINGLE_REF_RE,
    env_refs,
    expand_env,
    expand_text,
    is_secret_key,
    missing_ref,
)
from ..errors import ConfigError
from ..limits import AGENT_ID_RE, CHANNEL_RE, is_name, must_match
from ..redact import redact, secret_values
from ..yamlsrc import Path, SourceDoc
from .model import AgentSpec, ConfigFileError, ConfigIssue, fmt_path, pydantic_problems
from .values import plain_secret_problems, stored_value_problems


@dataclass(frozen=True)
class KnownAgents:
    """What a job may refer to: the valid agents, the invalid ones and the channels.

    ``channels`` is None when the caller did not say which channels are installed.
    """

    agents: dict[str, AgentSpec]
    bad: set[str]
    channels: BindingSchemas | None

    def schema(self, channel: str) -> type[BaseModel] | None:
        return (BUILTIN_BINDING_SCHEMAS if self.channels is None else self.channels).get(channel)


def file_error(doc: SourceDoc, source: str, rel: Path, path: str, message: str) -> ConfigFileError:
    return ConfigFileError([ConfigIssue(source, doc.line_of(rel), None, path, message)])


def load_agents(
    doc: SourceDoc, source: str, env: Mapping[str, str], schemas: BindingSchemas
) -> tuple[dict[str, AgentSpec], set[str], list[ConfigIssue]]:
    """Valid agents, the ids of invalid ones, and the issues that rejected them.

    ``schemas`` maps channel names to their binding schema (None: a mapping of strings);
    a channel it does not name is also held to a mapping of strings.
    """
    raw = doc.value.get("agents")
    if raw is None:
        return {}, set(), []
    if not isinstance(raw, dict):
        raise file_error(
            doc, source, ("agents",), "agents", "must be a mapping of agent id to channel bindings"
        )
    agents: dict[str, AgentSpec] = {}
    bad: set[str] = set()
    issues: list[ConfigIssue] = []
    for agent_id, bindings in raw.items():
        problems = list(_agent_problems(agent_id, bindings, env, schemas))
        secrets = secret_values(bindings, env)
        for rel, message in problems:
            message = redact(message, secrets)
            line = doc.line_of(("agents", agent_id, *rel))
            path = fmt_path("agents", (agent_id, *rel))
            issues.append(ConfigIssue(source, line, None, path, message, agent_id))
        if problems:
            bad.add(agent_id)
        else:
            agents[agent_id] = AgentSpec(agent_id, dict(bindings or {}))
    return agents, bad, issues


def _agent_problems(
    agent_id: str, bindings: Any, env: Mapping[str, str], schemas: BindingSchemas
) -> Iterator[tuple[Path, str]]:
    if not is_name(AGENT_ID_RE, agent_id):
        yield (), must_match("agent id", AGENT_ID_RE)
    if bindings is None:
        return
    if not isinstance(bindings, dict):
        yield (), "must be a mapping of channel name to binding"
        return
    for channel, binding in bindings.items():
        if not is_name(CHANNEL_RE, channel):
            yield (channel,), must_match("channel name", CHANNEL_RE)
        if not isinstance(binding, dict):
            message = "binding must be a mapping"
            if is_secret_key(channel):
                message += " (a secret belongs inside a channel's binding, as an ${ENV_VAR})"
            yield (channel,), message
            continue
        problems = list(_reference_problems(channel, binding, env, schemas.get(channel)))
        if not problems:
            problems = list(stored_value_problems(binding, (channel,)))
            problems += plain_secret_problems(binding, (channel,))
        if not problems:
            problems = list(_shape_problems(channel, binding, env, schemas.get(channel)))
        yield from problems


def _reference_problems(
    channel: str, binding: dict[str, Any], env: Mapping[str, str], schema: type[BaseModel] | None
) -> Iterator[tuple[Path, str]]:
    """Secret keys hold exactly one ``${VAR}`` or ``${file:/path}``; every reference is
    set (readable) and well formed."""
    for rel, value in _walk(binding, (channel,)):
        key = rel[-1]
        if (
            isinstance(key, str)
            and len(rel) > 1
            and (is_secret_key(key) or (len(rel) == 2 and is_secret_field(schema, key)))
            and not (isinstance(value, str) and SINGLE_REF_RE.fullmatch(value))
        ):
            yield rel, "secrets must be given as ${ENV_VAR} or ${file:/path} references"
        yield from env_problems(rel, value, env)


def _shape_problems(
    channel: str, binding: dict[str, Any], env: Mapping[str, str], schema: type[BaseModel] | None
) -> Iterator[tuple[Path, str]]:
    """The binding against its channel's schema (``${VAR}`` expanded), or as strings."""
    if schema is None:
        for rel, message in generic_binding_problems(binding):
            yield (channel, *rel), message
        return
    try:
        schema.model_validate(expand_env(binding, env))
    except ValidationError as exc:
        allowed = {(): sorted(schema.model_fields)}
        for loc, message in pydantic_problems(exc, allowed):
            yield (channel, *loc), message


def env_problems(rel: Path, value: Any, env: Mapping[str, str]) -> Iterator[tuple[Path, str]]:
    """Missing or malformed ``${VAR}`` references in one string value."""
    if not isinstance(value, str) or "${" not in value:
        return
    for name in sorted(env_refs(value)):
        if name not in env:
            yield rel, missing_ref(name)
    try:
        expand_text(value, {name: "" for name in env_refs(value)}, "")
    except ConfigError as exc:
        yield rel, exc.reason


def _walk(value: Any, rel: Path) -> Iterator[tuple[Path, Any]]:
    yield rel, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, (*rel, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, (*rel, index))
