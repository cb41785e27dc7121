"""``host.llm_invoke``: one chat-completions call to an OpenAI-compatible provider.

The providers come from the ``llm:`` section of ``NEXOPOLL_CONFIG`` (re-read when the
file changes). The base URL is operator-set and trusted, so private and loopback
addresses are allowed; redirects are never followed; the provider's ``timeout_secs``
is a total deadline (connect, headers and body) and the reply is capped at 4 MiB.
Errors: a timeout or connection failure, 429 and 5xx are transient (``Retry-After``
honoured); 401 and 403 are permanent; any other non-2xx is permanent; a malformed
reply is transient. The API key never appears in a message.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from nexopoll.core.errors import (
    ConfigError,
    CredentialsMissingError,
    PermanentError,
    PollerError,
    TransientError,
)
from nexopoll.core.llmconfig import LlmSettings, check_request, parse_llm, reply_from_json
from nexopoll.core.redact import redact
from nexopoll.core.yamlsrc import YamlSourceError, load_yaml
from nexopoll.net import http

log = logging.getLogger("nexopoll.llm")
MAX_REPLY_BYTES = 4 << 20
MAX_RETRY_AFTER_SECS = 3600

_lock = threading.Lock()
_cache: dict[str, Any] = {"stamp": None, "settings": None}


def load_settings(path: str, env: Mapping[str, str]) -> LlmSettings | None:
    """The ``llm:`` section of ``path`` (cached until the file changes)."""
    try:
        st = os.stat(path)
        stamp = (path, st.st_mtime_ns, st.st_size)
    except OSError:
        return None
    with _lock:
        if _cache["stamp"] == stamp:
            return _cache["settings"]
    try:
        with open(path, "rb") as f:
            doc = load_yaml(f.read())
    except (OSError, YamlSourceError) as exc:
        raise ConfigError(f"cannot read the llm: section of {path}: {exc}") from None
    value = doc.value.get("llm") if isinstance(doc.value, dict) else None
    settings, problems = parse_llm(value, env)
    if problems:
        raise ConfigError(
            "llm: section is invalid: "
            + "; ".join(f"llm.{'.'.join(map(str, p))}: {m}" if p else m for p, m in problems)
        )
    with _lock:
        _cache.update(stamp=stamp, settings=settings)
    return settings


def invoke(request: dict[str, Any], *, settings: LlmSettings | None, env: Mapping[str, str]):
    """Call the provider; return ``{content, model_id, usage, finish_reason}``."""
    provider, body = check_request(request, settings)
    key = env.get(provider.api_key_var, "")
    if not key:
        raise CredentialsMissingError(
            f"llm provider {provider.name}: environment variable {provider.api_key_var} is not set"
        )
    secrets = {key}
    where = f"llm provider {provider.name} ({body['model']})"
    try:
        resp = http.fetch(
            "POST",
            provider.chat_url,
            headers={"Authorization": f"Bearer {key}", "Accept": "application/json"},
            secret_headers=("Authorization",),
            json=body,
            allow_private=True,  # the base URL is operator-set and trusted
            max_bytes=MAX_REPLY_BYTES,
            deadline_secs=provider.timeout_secs,  # total: a slow drip cannot hold the tick
            max_redirects=0,
        )
    except http.DeadlineExceededError:
        raise TransientError(f"{where} timed out after {provider.timeout_secs:g}s") from None
    except PollerError as exc:
        cls = PermanentError if isinstance(exc, PermanentError) else TransientError
        raise cls(redact(f"{where}: {exc}", secrets)[:500]) from None
    status = resp.status
    if status >= 300:
        detail = redact(resp.body[:300].decode("utf-8", "replace"), secrets)
        message = f"{where} answered HTTP {status}: {detail}"
        if status in (401, 403):
            raise PermanentError(message + " (check the API key)")
        if status == 429 or status >= 500:
            raise TransientError(message, retry_after=_retry_after(resp.headers))
        raise PermanentError(message)
    try:
        reply = reply_from_json(json.loads(resp.body), provider.name)
    except ValueError as exc:
        raise TransientError(f"{where} sent a malformed reply: {str(exc)[:200]}") from None
    log.info(
        "llm.invoke provider=%s model=%s tokens=%s",
        provider.name,
        reply["model_id"],
        reply["usage"]["total_tokens"],
    )
    return reply


def _retry_after(headers: Mapping[str, str]) -> timedelta | None:
    value = headers.get("Retry-After", "")
    if value.strip().isdigit():
        return timedelta(seconds=min(int(value), MAX_RETRY_AFTER_SECS))
    return None
