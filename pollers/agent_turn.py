"""``agent_turn``: on each tick, ask an LLM one question and deliver its answer.

Config (``pollers.yaml`` → ``jobs[].config``)::

    llm: {provider: local, model: llama3}      # a provider + model of the top-level llm:
    system_prompt: "You are the on-call assistant."
    user_prompt: "Good morning! Today is {date}. Give me one tip for {agent_id}."
    language: es                               # optional: "Answer in language: es."
    max_tokens: 300                            # required; at most llm.max_tokens_cap
    temperature: 0.2                           # optional
    deliver: {channel: webhook, to: ops}

Prompt placeholders: ``{now}`` (ISO time of the tick), ``{date}``, ``{job_id}``,
``{agent_id}``, ``{language}``. The call goes through ``ctx.host.llm_invoke``
(timeouts, 429 and 5xx transient; 401/403 permanent). An empty answer delivers
nothing. The cursor keeps the job's token usage:
``{"v": 1, "turns": n, "prompt_tokens": …, "completion_tokens": …, "total_tokens": …}``.
"""

from __future__ import annotations

import json
from typing import Any

from nexopoll.core.contract import PollContext, Poller, TickAck
from nexopoll.core.errors import ConfigError
from nexopoll.core.llmconfig import HARD_MAX_TOKENS
from nexopoll.core.templates import TemplateError, check_template, render

KEYS = {"llm", "system_prompt", "user_prompt", "language", "max_tokens", "temperature", "deliver"}
PLACEHOLDERS = {"now", "date", "job_id", "agent_id", "language"}
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")
MAX_PROMPT_CHARS = 32_000


class AgentTurnPoller(Poller):
    kind = "agent_turn"
    description = "asks an LLM (the llm: providers) a prompt each tick and delivers the answer"

    def validate(self, config: dict[str, Any]) -> None:
        for key in sorted(set(config) - KEYS):
            raise ConfigError(f"unknown key (allowed: {', '.join(sorted(KEYS))})", path=key)
        llm = config.get("llm")
        if (
            not isinstance(llm, dict)
            or set(llm) != {"provider", "model"}
            or not all(isinstance(v, str) and v for v in llm.values())
        ):
            raise ConfigError("must be {provider, model}", path="llm")
        for key in ("system_prompt", "user_prompt"):
            text = config.get(key, "" if key == "system_prompt" else None)
            if not isinstance(text, str) or (key == "user_prompt" and not text.strip()):
                raise ConfigError("must be a non-empty string", path=key)
            if len(text) > MAX_PROMPT_CHARS:
                raise ConfigError(f"longer than {MAX_PROMPT_CHARS} characters", path=key)
            try:
                unknown = set(check_template(text)) - PLACEHOLDERS
            except TemplateError as exc:
                raise ConfigError(str(exc), path=key) from None
            if unknown:
                raise ConfigError(
                    f"unknown placeholder(s) {sorted(unknown)}; known: {sorted(PLACEHOLDERS)}",
                    path=key,
                )
        language = config.get("language")
        if language is not None and (not isinstance(language, str) or not language.strip()):
            raise ConfigError("must be a language name or code", path="language")
        max_tokens = config.get("max_tokens")
        if (
            isinstance(max_tokens, bool)
            or not isinstance(max_tokens, int)
            or not 1 <= max_tokens <= HARD_MAX_TOKENS
        ):
            raise ConfigError(
                f"is required: an integer in 1..={HARD_MAX_TOKENS} "
                "(and at most llm.max_tokens_cap)",
                path="max_tokens",
            )
        temperature = config.get("temperature")
        if temperature is not None and (
            isinstance(temperature, bool)
            or not isinstance(temperature, int | float)
            or not 0 <= temperature <= 2
        ):
            raise ConfigError("must be a number in 0..2", path="temperature")
        deliver = config.get("deliver")
        if not isinstance(deliver, dict) or set(deliver) != {"channel", "to"}:
            raise ConfigError("must be {channel, to}", path="deliver")

    def tick(self, ctx: PollContext) -> TickAck:
        cfg = ctx.config
        self.validate(cfg)
        values = {
            "now": ctx.now.isoformat(),
            "date": ctx.now.date().isoformat(),
            "job_id": ctx.job_id,
            "agent_id": ctx.agent_id,
            "language": cfg.get("language") or "",
        }
        system = render(cfg.get("system_prompt", ""), values)
        if cfg.get("language"):
            system = (system + "\n\n" if system else "") + f"Answer in language: {cfg['language']}."
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": render(cfg["user_prompt"], values)}
        ]
        request: dict[str, Any] = {
            "provider": cfg["llm"]["provider"],
            "model": cfg["llm"]["model"],
            "messages": messages,
            "max_tokens": cfg["max_tokens"],
        }
        if cfg.get("temperature") is not None:
            request["temperature"] = cfg["temperature"]
        ctx.cancel.raise_if_cancelled()
        reply = ctx.host.llm_invoke(request)
        content = str(reply.get("content") or "").strip()
        usage = reply.get("usage") or {}
        dispatched = 0
        if content:
            target = cfg["deliver"]
            ctx.host.deliver(
                target["channel"],
                target["to"],
                {
                    "text": content,
                    "job_id": ctx.job_id,
                    "model": reply.get("model_id", ""),
                    "usage": {k: int(usage.get(k, 0) or 0) for k in USAGE_KEYS},
                },
            )
            dispatched = 1
        else:
            ctx.host.log("info", "agent_turn: empty answer, nothing delivered")
        return TickAck(
            next_cursor=_count(ctx.cursor, usage),
            items_seen=1,
            items_dispatched=dispatched,
        )


def _count(cursor: bytes | None, usage: dict[str, Any]) -> bytes:
    """The running token totals kept in the cursor (a bad old cursor restarts at zero)."""
    try:
        state = json.loads(cursor) if cursor else {}
    except ValueError:
        state = {}
    if not isinstance(state, dict) or state.get("v") != 1:
        state = {}
    out: dict[str, int] = {"v": 1, "turns": _int(state.get("turns")) + 1}
    for key in USAGE_KEYS:
        out[key] = _int(state.get(key)) + _int(usage.get(key))
    return json.dumps(out, sort_keys=True).encode()


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
