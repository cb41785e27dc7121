"""Fixtures for plugin tests: manifests written to a temp dir, a recording host, a ctx."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from nexopoll.core.contract import CancelToken, PollContext
from nexopoll.core.errors import CredentialsMissingError, PermanentError
from nexopoll.plugins import poller as plugin_poller
from nexopoll.plugins.manifest import parse_manifest
from nexopoll.plugins.poller import Options, pollers_for
from nexopoll.plugins.process import Limits
from nexopoll.runtime.redis import get_redis

HERE = Path(__file__).resolve().parent
MISBEHAVE = HERE / "misbehave.py"
SECRET = "s3cr3t-token-value"


def manifest_text(
    plugin_id: str,
    kinds: list[str],
    *,
    lifecycle: str = "long_lived",
    command: str = "{python}",
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    max_concurrent: int = 4,
    timeout: int = 10,
) -> str:
    args = [str(MISBEHAVE)] if args is None else args
    env_line = ", ".join(f'{k} = "{v}"' for k, v in (env or {}).items())
    return (
        f'[plugin]\nid = "{plugin_id}"\n\n[plugin.entrypoint]\ncommand = "{command}"\n'
        f"args = {args!r}\nenv = {{ {env_line} }}\n\n[plugin.poller]\n"
        f'kinds = {kinds!r}\nlifecycle = "{lifecycle}"\n'
        f"max_concurrent_ticks = {max_concurrent}\ntick_timeout_secs = {timeout}\n"
    ).replace("'", '"')


def write_plugin(root: Path, plugin_id: str, kinds: list[str], **kw) -> Path:
    d = root / plugin_id
    d.mkdir(parents=True, exist_ok=True)
    path = d / "nexopoll-plugin.toml"
    path.write_text(manifest_text(plugin_id, kinds, **kw))
    return path


class RecordingHost:
    """A hand-written PollerHost that records what the plugin asked for."""

    def __init__(self) -> None:
        self.deliveries: list[tuple[str, str, dict]] = []
        self.logs: list[tuple[str, str, dict]] = []
        self.metrics: list[tuple[str, dict]] = []
        self.llm: list[dict] = []

    def deliver(self, channel: str, recipient: str, payload: dict[str, Any]) -> None:
        self.deliveries.append((channel, recipient, payload))

    def publish(self, topic: str, payload: bytes) -> None:
        raise PermanentError("no publish")

    def credentials_get(self, channel: str) -> dict[str, Any]:
        if channel != "webhook":
            raise CredentialsMissingError(f"no {channel} binding")
        return {"url": "http://127.0.0.1:9/hook", "token": SECRET}

    def log(self, level: str, message: str, **fields: Any) -> None:
        self.logs.append((level, message, fields))

    def metric_inc(self, name: str, **labels: str) -> None:
        self.metrics.append((name, labels))

    def llm_invoke(self, request: dict[str, Any]) -> dict[str, Any]:
        self.llm.append(request)
        return {"content": "hello", "usage": {"prompt_tokens": 1, "completion_tokens": 1}}


def make_ctx(
    kind: str,
    config: dict | None = None,
    *,
    cursor: bytes | None = None,
    host: Any = None,
    deadline: float = 30.0,
) -> PollContext:
    return PollContext(
        job_id="job1",
        agent_id="ana",
        kind=kind,
        config=config or {},
        cursor=cursor,
        now=datetime(2026, 1, 1, tzinfo=UTC),
        interval_hint=timedelta(seconds=60),
        cancel=CancelToken(deadline=time.monotonic() + deadline),
        host=host if host is not None else RecordingHost(),
    )


OPTIONS = Options(
    limits=Limits(max_line_bytes=1 << 20), restart_base_secs=0.2, restart_cap_secs=1.0
)


@pytest.fixture
def plugin(tmp_path, redis_client):
    """``plugin(kind, lifecycle=…, **manifest)`` → the registry's Poller for that kind."""
    made = []

    def factory(kind: str = "misbehave", **kw):
        options = kw.pop("options", OPTIONS)
        path = write_plugin(tmp_path / "plugins", kw.pop("plugin_id", "mis"), [kind], **kw)
        m = parse_manifest(path.read_text(), str(path))
        (p,) = pollers_for(m, options, get_redis)
        made.append(p)
        return p

    yield factory
    plugin_poller.stop_all()
