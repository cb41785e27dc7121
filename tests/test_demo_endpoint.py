"""/demo/items (the feed config/pollers.yaml's demo jobs poll) is mounted only with
NEXOPOLL_DEMO on: `make run` and docker/compose.yaml turn it on, a deployment leaves it off."""

from __future__ import annotations

import importlib
import os

import pytest
from django.urls import clear_url_caches, resolve

import nexopoll.urls
import nexopoll.views
from tests.support.procs import ROOT, run_manage


@pytest.fixture
def mount(settings):
    """Re-read nexopoll/urls.py with NEXOPOLL_DEMO set as asked; as before afterwards."""
    before = settings.NEXOPOLL_DEMO

    def load(demo: bool) -> None:
        settings.NEXOPOLL_DEMO = demo
        importlib.reload(nexopoll.urls)
        clear_url_caches()

    yield load
    load(before)


def test_the_demo_feed_answers_when_the_demo_is_on(mount, client):
    mount(True)
    resp = client.get("/demo/items", HTTP_HOST="localhost")
    assert resp.status_code == 200
    items = resp.json()["items"]
    assert len(items) == 5 and all({"id", "title", "published"} <= set(i) for i in items)


def test_without_the_demo_the_path_is_not_found(mount, client):
    mount(False)
    assert client.get("/demo/items", HTTP_HOST="localhost").status_code == 404
    assert resolve("/healthz").func is nexopoll.views.healthz  # the rest is mounted as before


@pytest.mark.parametrize(("value", "expected"), [("1", "True"), ("", "False"), (None, "False")])
def test_the_setting_reads_nexopoll_demo(value, expected):
    env = {k: v for k, v in os.environ.items() if k != "NEXOPOLL_DEMO"}
    if value is not None:
        env["NEXOPOLL_DEMO"] = value
    code = "from django.conf import settings; print(settings.NEXOPOLL_DEMO)"
    done = run_manage(env, "shell", "-c", code)
    assert done.stdout.strip().splitlines()[-1] == expected, done.stderr


def test_make_run_turns_the_demo_on():
    recipe = (ROOT / "Makefile").read_text().split("\nrun:", 1)[1].split("\n\n", 1)[0]
    assert "NEXOPOLL_DEMO=1" in recipe
