"""One masking rule on every surface: logs, CLI, admin, API and MCP.

A declared-public variable (``NEXOPOLL_PUBLIC_VARS``) stays readable everywhere; a
secret, a whole-URL one included, is masked everywhere."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from nexopoll.llm_tools import call_tool
from nexopoll.runtime.tick import tick_job
from tests.admin.conftest import staff
from tests.support.jobs import webhook_poll_job
from tests.support.procs import free_port

NOW = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)
CANARY = "Can4ryS3cretV4lue9f8e"


def jobs() -> list[dict]:
    return [
        {
            "id": "blog",
            "kind": "rss",
            "agent": "ana",
            "schedule": {"every_secs": 60},
            "config": {
                "feed_url": "${FEED_BASE}/blog.xml",
                "deliver": {"channel": "log", "to": "ops"},
            },
        },
        webhook_poll_job("hook", "${HOOK_URL}"),
    ]


# one base for the module: a job's expanded config is cached by its definition
BASE, HOOK_PORT = f"http://127.0.0.1:{free_port()}", free_port()


@pytest.fixture
def failed(cfg, monkeypatch, caplog):
    base = BASE
    monkeypatch.setenv("NEXOPOLL_PUBLIC_VARS", "OTHER_BASE, FEED_BASE")
    monkeypatch.setenv("FEED_BASE", base)
    monkeypatch.setenv("HOOK_URL", f"http://localhost:{HOOK_PORT}/hooks/{CANARY}")
    cfg.write(jobs(), agents={"ana": {"log": {}}})
    cfg.reload()
    with caplog.at_level(logging.INFO):
        assert tick_job("blog", now=NOW).status == "permanent"
        assert tick_job("hook", now=NOW).status == "transient"
    return base + "/blog.xml"


def test_the_logs_show_the_public_base_and_mask_the_secret(failed, caplog):
    text = "\n".join(r.getMessage() for r in caplog.get_records("setup"))  # the fixture's ticks
    line = next(line for line in text.splitlines() if "tick.done job=blog" in line)
    assert f"error={failed}: host resolves to 127.0.0.1 (loopback)" in line
    assert "tick.done job=hook" in text and CANARY not in text
    assert "/hooks/" not in text  # the whole-URL secret, not a part of it


def cli(*args: str) -> str:
    out = StringIO()
    call_command("pollers", *args, stdout=out)
    return out.getvalue()


def test_the_cli_admin_api_and_mcp_show_the_same(failed, api):
    surfaces = {
        "cli show": cli("show", "blog") + cli("show", "hook"),
        "cli list": cli("list", "--json"),
        "cli history": cli("history", "blog") + cli("history", "hook", "--json"),
        "api show": api.get("/api/pollers/blog").content.decode()
        + api.get("/api/pollers/hook").content.decode(),
        "api list": api.get("/api/pollers").content.decode(),
        "mcp": json.dumps(
            [call_tool("pollers_list", {})]
            + [call_tool("pollers_show", {"id": i}) for i in ("blog", "hook")]
        ),
    }
    client = Client()
    client.force_login(staff("op", "view_job"))
    surfaces["admin"] = client.get("/admin/admin_ext/job/").content.decode()
    for name, text in surfaces.items():
        assert CANARY not in text and "/hooks/" not in text, (name, text)
        assert failed.replace("/", "\\/") in text or failed in text, (name, text)
