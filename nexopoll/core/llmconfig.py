"""The top-level ``llm:`` section of ``pollers.yaml``: OpenAI-compatible providers.

Pure: the environment is a parameter, nothing is fetched. ::

    llm:
      max_tokens_cap: 4096            # optional; a request above it is refused
      providers:
        local:
          base_url: http://127.0.0.1:8080/v1   # operator-set and trusted
          api_key: ${LOCAL_LLM_KEY}            # a ${ENV} reference, never a literal
          models: [llama3, qwen2]
          timeout_secs: 60                     # optional, 1..=600

A request (``host.llm_invoke``) names ``provider``, ``model``, ``messages`` and
``max_tokens``; :func:`check_request` validates it against these settings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .envrefs import SINGLE_REF_RE
from .errors import ConfigError

Problems = list[tuple[tuple[str | int, ...], str]]
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
DEFAULT_MAX_TOKENS_CAP = 4096
HARD_MAX_TOKENS = 131_072
ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class Provider:
    name: str
    base_url: str
    api_key_ref: str  # "${VAR}"
    models: tuple[str, ...]
    timeout_secs: float = 60.0

    @property
    def api_key_var(self) -> str:
        return self.api_key_ref[2:-1]

    @property
    def chat_url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"


@dataclass(frozen=True)
class LlmSettings:
    providers: Mapping[str, Provider]
    max_tokens_cap: int = DEFAULT_MAX_TOKENS_CAP


def parse_llm(value: Any, env: Mapping[str, str]) -> tuple[LlmSettings | None, Problems]:
    """``(settings, problems)``; paths are relative to ``llm``. ``None`` when absent."""
    if value is None:
        return None, []
    problems: Problems = []
    if not isinstance(value, dict):
        return None, [((), "must be a mapping with 'providers:'")]
    for key in sorted(set(value) - {"providers", "max_tokens_cap"}):
        problems.append(((key,), "unknown key (allowed: max_tokens_cap, providers)"))
    cap = value.get("max_tokens_cap", DEFAULT_MAX_TOKENS_CAP)
    if not _int_in(cap, 1, HARD_MAX_TOKENS):
        problems.append((("max_tokens_cap",), f"must be an integer in 1..={HARD_MAX_TOKENS}"))
        cap = DEFAULT_MAX_TOKENS_CAP
    raw = value.get("providers")
    if not isinstance(raw, dict) or not raw:
        problems.append((("providers",), "must be a non-empty mapping of provider name → settings"))
        raw = {}
    providers = {}
    for name, spec in raw.items():
        p = _provider(str(name), spec, env, problems)
        if p is not None:
            providers[p.name] = p
    if problems:
        return None, problems
    return LlmSettings(providers=providers, max_tokens_cap=cap), []


def _provider(name: str, spec: Any, env: Mapping[str, str], problems: Problems) -> Provider | None:
    at = ("providers", name)
    before = len(problems)
    if not NAME_RE.fullmatch(name):
        problems.append((at, f"provider name must match {NAME_RE.pattern}"))
    if not isinstance(spec, dict):
        problems.append((at, "must be a mapping with base_url, api_key and models"))
        return None
    for key in sorted(set(spec) - {"base_url", "api_key", "models", "timeout_secs"}):
        allowed = "api_key, base_url, models, timeout_secs"
        problems.append(((*at, key), f"unknown key (allowed: {allowed})"))
    url = spec.get("base_url")
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        problems.append(((*at, "base_url"), "must be an http(s) URL"))
    elif parts.username or parts.password or parts.query or parts.fragment:
        problems.append(((*at, "base_url"), "must not carry credentials, a query or a fragment"))
    key = spec.get("api_key")
    if not isinstance(key, str) or not SINGLE_REF_RE.match(key):
        problems.append(((*at, "api_key"), "must be one ${ENV_VAR} reference, never a literal key"))
    elif key[2:-1] not in env:
        problems.append(((*at, "api_key"), f"environment variable {key[2:-1]} is not set"))
    models = spec.get("models")
    if (
        not isinstance(models, list)
        or not models
        or not all(isinstance(m, str) and m.strip() for m in models)
    ):
        problems.append(((*at, "models"), "must be a non-empty list of model names"))
        models = []
    timeout = spec.get("timeout_secs", 60)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 1 <= timeout <= 600:
        problems.append(((*at, "timeout_secs"), "must be a number in 1..=600"))
    if len(problems) > before:
        return None
    return Provider(name, url, key, tuple(models), float(timeout))


def check_request(request: Any, settings: LlmSettings | None) -> tuple[Provider, dict[str, Any]]:
    """Validate an ``llm_invoke`` request; return its provider and the chat-completions body.

    Raises ConfigError (the job's config or the ``llm:`` section is wrong).
    """
    if settings is None:
        raise ConfigError("no llm: section in pollers.yaml: LLM calls are not configured")
    if not isinstance(request, dict):
        raise ConfigError("llm request must be an object")
    name, model = request.get("provider"), request.get("model")
    provider = settings.providers.get(name) if isinstance(name, str) else None
    if provider is None:
        known = ", ".join(sorted(settings.providers))
        raise ConfigError(f"unknown llm provider {name!r} (configured: {known})")
    if model not in provider.models:
        raise ConfigError(
            f"model {model!r} is not configured for provider {name!r} "
            f"(models: {', '.join(provider.models)})"
        )
    max_tokens = request.get("max_tokens")
    if not _int_in(max_tokens, 1, HARD_MAX_TOKENS):
        raise ConfigError("max_tokens is required: a positive integer")
    if max_tokens > settings.max_tokens_cap:
        raise ConfigError(
            f"max_tokens {max_tokens} is over the cap {settings.max_tokens_cap} "
            "(llm.max_tokens_cap)"
        )
    messages = request.get("messages")
    if (
        not isinstance(messages, list)
        or not messages
        or not all(
            isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)
            for m in messages
        )
    ):
        raise ConfigError("messages must be a non-empty list of {role, content} objects")
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
        "max_tokens": max_tokens,
    }
    temperature = request.get("temperature")
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, int | float):
            raise ConfigError("temperature must be a number")
        body["temperature"] = float(temperature)
    return provider, body


def _int_in(value: Any, lo: int, hi: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def reply_from_json(doc: Any, provider: str) -> dict[str, Any]:
    """A chat-completions response body → ``{content, model_id, usage, finish_reason}``.

    Raises ValueError naming what is missing (the caller makes it a transient error).
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("choices"), list):
        raise ValueError(f"llm provider {provider} sent no choices")
    choice = doc["choices"][0] if doc["choices"] else {}
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise ValueError(f"llm provider {provider} sent a choice without a message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise ValueError(f"llm provider {provider} sent non-text content")
    raw_usage = doc.get("usage") if isinstance(doc.get("usage"), dict) else {}
    usage = {
        k: raw_usage.get(k, 0) if _int_in(raw_usage.get(k, 0), 0, 10**12) else 0
        for k in ("prompt_tokens", "completion_tokens", "total_tokens")
    }
    if not usage["total_tokens"]:
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return {
        "content": content or "",
        "model_id": str(doc.get("model") or ""),
        "usage": usage,
        "finish_reason": choice.get("finish_reason"),
    }
