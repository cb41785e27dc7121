"""A local server speaking OpenAI's chat-completions protocol, for agent_turn tests."""

from __future__ import annotations

import json
from typing import Any

from tests.support.httpserver import RecordedRequest, TestHTTPServer

PATH = "/v1/chat/completions"
KEY = "sk-test-canary-4242"


def chat(content: str | None = "Hello from the model", *, key: str = KEY) -> Any:
    """Answer like an OpenAI-compatible server: 401 for a wrong key, usage counted."""

    def handle(req: RecordedRequest):
        if req.header("Authorization") != f"Bearer {key}":
            given = req.header("Authorization")
            body = {"error": {"message": f"Incorrect API key provided: {given}"}}
            return 401, {"Content-Type": "application/json"}, json.dumps(body).encode()
        doc = json.loads(req.body)
        prompt = sum(len(m["content"].split()) for m in doc["messages"])
        completion = len((content or "").split())
        reply = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": doc["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": content},
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
        return 200, {"Content-Type": "application/json"}, json.dumps(reply).encode()

    return handle


def llm_yaml(server: TestHTTPServer, *, cap: int = 1000, timeout: int = 2) -> dict:
    return {
        "max_tokens_cap": cap,
        "providers": {
            "local": {
                "base_url": server.url("/v1"),
                "api_key": "${TEST_LLM_KEY}",
                "models": ["tiny-1", "tiny-2"],
                "timeout_secs": timeout,
            }
        },
    }


def requests_to(server: TestHTTPServer) -> list[dict]:
    return [json.loads(r.body) for r in server.requests if r.path == PATH]
