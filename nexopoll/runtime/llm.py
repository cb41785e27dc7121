"""``host.llm_invoke``: one chat-completions call to an OpenAI-compatible provider.

The providers come from the ``llm:`` section of ``NEXOPOLL_CONFIG`` (re-read when the
file changes). The base URL is operator-set and trusted, so it is called directly
(loopback allowed), never following redirects. Errors: a timeout or connection
failure, 429 and 5xx are transient (``Retry-After`` honoured); 401 and 403 are
permanent; any other non-2xx is permanent; a malformed reply is transient. The API
key never appears in a message.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import requests

from nexopoll.core.errors import (
    ConfigError,
    CredentialsMissingError,
    PermanentError,
    TransientError,
)
from nexopoll.core.llmconfig import LlmSettings, check_request, parse_llm, reply_from_json
from nexopoll.core.redact import redact
from nexopoll.core.yamlsrc import YamlSourceError, load_yaml

log = logging.getLogger("nexopoll.llm")
MAX_REPLY_BYTES = 4 << 20
MAX_RETRY_AFTER_SECS = 3600

_lock = threading.Lock()
_cache: dict[str, Any] = {"stamp": None, "settings": None}
_session = threading.local()


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


def _http() -> requests.Session:
    s = getattr(_session, "s", None)
    if s is None:
        s = requests.Session()
        s.trust_env = False  # no proxy or netrc from the environment
        _session.s = s
    return s


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
        resp = _http().post(
            provider.chat_url,
            json=body,
            headers={"Authorization": f"Bearer {key}", "Accept": "application/json"},
            timeout=provider.timeout_secs,
            allow_redirects=False,
            stream=True,
        )
    except requests.Timeout:
        raise TransientError(f"{where} timed out after {provider.timeout_secs:g}s") from None
    except requests.RequestException as exc:
        raise TransientError(redact(f"{where} unreachable: {exc}", secrets)[:500]) from None
    try:
        raw = _read(resp, where, provider.timeout_secs)
    finally:
        resp.close()
    status = resp.status_code
    if status >= 300:
        detail = redact(raw[:300].decode("utf-8", "replace"), secrets)
        message = f"{where} answered HTTP {status}: {detail}"
        if status in (401, 403):
            raise PermanentError(message + " (check the API key)")
        if status == 429 or status >= 500:
            raise TransientError(message, retry_after=_retry_after(resp.headers))
        raise PermanentError(message)
    try:
        reply = reply_from_json(json.loads(raw), provider.name)
    except ValueError as exc:
        raise TransientError(f"{where} sent a malformed reply: {str(exc)[:200]}") from None
    log.info("llm.invoke provider=%s model=%s tokens=%s", provider.name, reply["model_id"],
             reply["usage"]["total_tokens"])  # fmt: skip
    return reply


def _read(resp: requests.Response, where: str, timeout: float) -> bytes:
    chunks, size = [], 0
    try:
        for chunk in resp.iter_content(65536):
            size += len(chunk)
            if size > MAX_REPLY_BYTES:
                raise TransientError(f"{where} sent a reply over {MAX_REPLY_BYTES} bytes")
            chunks.append(chunk)
    except requests.RequestException:
        raise TransientError(f"{where} timed out after {timeout:g}s reading the reply") from None
    return b"".join(chunks)


def _retry_after(headers: Mapping[str, str]) -> timedelta | None:
    value = headers.get("Retry-After", "")
    if value.strip().isdigit():
        return timedelta(seconds=min(int(value), MAX_RETRY_AFTER_SECS))
    return None
