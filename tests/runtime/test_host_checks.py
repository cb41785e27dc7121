"""What a tick hands its host (deliver, publish, log) is checked as the config is.

Through the real tick (DB, Redis), on a built-in path (``HandPoller`` below, an
in-process poller) and a plugin path (the ``misbehave`` subprocess plugin): a payload
value that is not JSON, a recipient with a newline, a publish topic that is no
string pause the job naming the field, nothing committed; one delivery over
``NEXOPOLL_MAX_DELIVERIES_PER_TICK`` fails the tick permanently, nothing committed;
a plugin's log line with a newline is refused; the host's own log lines are one line.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from django.utils import timezone

from nexopoll.core.contract import PollContext, Poller, TickAck
from nexopoll.models import Delivery, PollState
from nexopoll.runtime.registry import reset_registry
from nexopoll.runtime.tick import tick_job
from tests.plugins.conftest import write_plugin

from .conftest import scripted

LOG = {"channel": "log", "to": "ops"}
WHEN = datetime(2026, 1, 1, tzinfo=UTC)
BAD = {
    "datetime": ({"when": WHEN}, "payload.when: datetime is not JSON"),
    "bytes": ({"raw": b"\x00"}, "payload.raw: bytes is not JSON"),
    "set": ({"tags": {"a"}}, "payload.tags: set is not JSON"),
    "nan": ({"score": float("nan")}, "payload.score: NaN is not JSON"),
    "nested": ({"meta": {"items": [1, {"at": WHEN}]}}, "payload.meta.items[1].at: datetime"),
    "key": ({"by_id": {7: "x"}}, "payload.by_id: key 7 is int, not a string"),
}


class HandPoller(Poller):
    """Does what ``config.case`` says with the host; ``config.swallow`` catches what
    the host raised and returns as if all went well."""

    kind = "hand"
    description = "test poller handing the host bad values"

    def validate(self, config: dict[str, Any]) -> None:
        pass

    def tick(self, ctx: PollContext) -> TickAck:
        cfg = ctx.config
        case = cfg["case"]
        try:
            if case == "to":
                ctx.host.deliver("log", cfg["to"], {"text": "x"})
            elif case == "many":
                for i in range(cfg["n"]):
                    ctx.host.deliver("log", "ops", {"text": f"n{i}", "item_id": i})
            elif case == "topic":
                ctx.host.publish(7, b"x")
            elif case == "log":
                ctx.host.log("info", "one\nFORGED line", field="a\r\nFORGED too")
            else:
                ctx.host.deliver("log", "ops", {"text": "x", **BAD[case][0]})
        except Exception:
            if not cfg.get("swallow"):
                raise
        return TickAck(next_cursor=b"moved", items_seen=1, items_dispatched=1)


@pytest.fixture
def kinds(cfg, settings, tmp_path):
    """The ``hand`` poller and the ``mis_host`` plugin in the registry."""
    settings.NEXOPOLL_EXTRA_POLLERS = (
        "tests.support.testpollers:ScriptedPoller,tests.runtime.test_host_checks:HandPoller"
    )
    settings.NEXOPOLL_PLUGINS_DIR = str(tmp_path / "plugins")
    write_plugin(tmp_path / "plugins", "mis", ["mis_host"], lifecycle="ephemeral")
    reset_registry()
    yield cfg
    reset_registry()


def run(cfg, kind: str, config: dict, **globals_) -> PollState:
    cfg.write([scripted("j", kind=kind, config=config)], **globals_)
    assert not cfg.reload().issues
    tick_job("j", now=timezone.now())
    return PollState.objects.get(job_id="j")


def assert_paused_nothing_committed(state: PollState, error: str) -> None:
    assert state.paused, state.last_error
    assert error in state.last_error, state.last_error
    assert state.cursor is None  # the cursor did not move
    assert not Delivery.objects.filter(job_id="j", purpose="item").exists()


# -- issue 15: deliver/publish values ---------------------------------------------------
@pytest.mark.parametrize("swallow", [False, True])
@pytest.mark.parametrize("case", sorted(BAD))
def test_builtin_payload_that_is_not_json_pauses_the_job_naming_the_field(kinds, case, swallow):
    state = run(kinds, "hand", {"case": case, "swallow": swallow})
    assert_paused_nothing_committed(state, BAD[case][1])
    assert "config error" in (state.paused_reason or state.last_error)


def test_builtin_recipient_with_a_newline_pauses_the_job(kinds):
    state = run(kinds, "hand", {"case": "to", "to": "ops\nFORGED", "swallow": True})
    assert_paused_nothing_committed(state, "deliver.to contains the control or format character")


def test_builtin_recipient_over_500_characters_pauses_the_job(kinds):
    state = run(kinds, "hand", {"case": "to", "to": "x" * 501})
    assert_paused_nothing_committed(state, "deliver.to must be 1..500 characters")


def test_builtin_publish_topic_that_is_no_string_pauses_the_job(kinds):
    state = run(kinds, "hand", {"case": "topic"})
    assert_paused_nothing_committed(state, "publish topic must be a string, got int")


@pytest.mark.parametrize(
    "params, error",
    [
        ({"channel": "log", "to": "ops\nFORGED", "payload": {}}, "deliver.to contains"),
        ({"channel": "log", "to": {"a": 1}, "payload": {}}, "deliver.to must be a string"),
        ({"channel": "log", "to": "ops", "payload": [1, 2]}, "must be a JSON object, got list"),
        ({"channel": "Log\n", "to": "ops", "payload": {}}, "deliver.channel"),
    ],
)
def test_plugin_deliver_with_bad_values_pauses_the_job_even_if_it_goes_on(kinds, params, error):
    state = run(kinds, "mis_host", {"mode": "raw_calls", "calls": [["deliver", params]]})
    assert_paused_nothing_committed(state, error)


# -- the delivery cap -------------------------------------------------------------------
@pytest.mark.parametrize("swallow", [False, True])
def test_builtin_deliveries_over_the_cap_fail_the_tick_permanently(kinds, settings, swallow):
    settings.NEXOPOLL_MAX_DELIVERIES_PER_TICK = 5
    state = run(kinds, "hand", {"case": "many", "n": 6, "swallow": swallow})
    assert state.last_status == "permanent"
    assert_paused_nothing_committed(state, "more than 5 deliveries")
    assert "NEXOPOLL_MAX_DELIVERIES_PER_TICK" in state.last_error


def test_deliveries_up_to_the_cap_commit(kinds, settings):
    settings.NEXOPOLL_MAX_DELIVERIES_PER_TICK = 5
    state = run(kinds, "hand", {"case": "many", "n": 5})
    assert state.last_status == "ok" and bytes(state.cursor) == b"moved"
    assert Delivery.objects.filter(job_id="j", purpose="item").count() == 5


@pytest.mark.parametrize("ignore_errors", [False, True])
def test_plugin_deliveries_over_the_cap_fail_the_tick_permanently(kinds, settings, ignore_errors):
    settings.NEXOPOLL_MAX_DELIVERIES_PER_TICK = 5
    config = {"mode": "deliver_many", "n": 8, "ignore_errors": ignore_errors, "deliver": LOG}
    state = run(kinds, "mis_host", config)
    assert state.last_status == "permanent"
    assert_paused_nothing_committed(state, "more than 5 deliveries")


def test_the_default_cap_is_1000(kinds):
    state = run(kinds, "hand", {"case": "many", "n": 1001})
    assert_paused_nothing_committed(state, "more than 1000 deliveries")


# -- log lines --------------------------------------------------------------------------
def test_plugin_log_with_a_newline_is_refused_and_never_logged(kinds, caplog):
    caplog.set_level(logging.INFO)
    calls = [
        ["log", {"level": "info", "message": "one\nFORGED line", "fields": {}}],
        ["log", {"level": "info", "message": "ok", "fields": {"f": "v\u2028FORGED"}}],
        ["log", {"level": "info", "message": "x" * 2001, "fields": {}}],
        ["log", {"level": "info\nFORGED", "message": "ok", "fields": {}}],
        ["log", {"level": "info", "message": "clean line", "fields": {"n": 1}}],
    ]
    state = run(kinds, "mis_host", {"mode": "raw_calls", "calls": calls})
    assert state.last_status == "ok"  # a refused log line does not fail the tick
    answers = bytes(state.cursor).decode()
    assert answers.count('"code": -32602') == 4, answers
    lines = [r.getMessage() for r in caplog.records]
    assert not any("\n" in m or "\u2028" in m for m in lines if "poller.log" in m)
    assert any("clean line" in m for m in lines)
    assert sum("plugin.log_refused" in m for m in lines) == 4


def test_builtin_log_lines_are_escaped_to_one_line(kinds, caplog):
    caplog.set_level(logging.INFO)
    state = run(kinds, "hand", {"case": "log"})
    assert state.last_status == "ok"
    (line,) = [r.getMessage() for r in caplog.records if "poller.log" in r.getMessage()]
    assert "\n" not in line and "\r" not in line and "one\\nFORGED line" in line


SDK_PLUGIN = """
from datetime import datetime
from nexopoll.plugin_sdk import Result, run

def handle(tick):
    tick.deliver("log", "ops", {"text": "x", "meta": {"when": datetime(2026, 1, 1)}})
    return Result(next_cursor=b"1")

run(handle)
"""


def test_sdk_plugin_payload_that_is_not_json_pauses_the_job_naming_the_field(kinds, tmp_path):
    script = tmp_path / "sdk_bad.py"
    script.write_text(SDK_PLUGIN)
    write_plugin(
        tmp_path / "plugins", "sdkbad", ["sdk_bad"], lifecycle="ephemeral", args=[str(script)]
    )
    reset_registry()
    state = run(kinds, "sdk_bad", {})
    assert_paused_nothing_committed(state, "payload.meta.when: datetime is not JSON")
