"""Plugins end to end: real Celery worker(s) and beat, real Redis, the test DB, the sink.

Per lifecycle, one stack runs well-behaved jobs (cursor round-trip, every error code,
a deliver from a failed tick) on one plugin and misbehaving ones (hang with a
grandchild, a 10 MB line, a crash mid-tick that then heals) on another. A second test
runs two worker processes against a plugin with max_concurrent_ticks = 1.
"""

from __future__ import annotations

import itertools
import json

import pytest

from nexopoll.models import Delivery, PollState
from nexopoll.runtime.registry import reset_registry
from tests.integration.conftest import stack  # noqa: F401  (the fixture)

# ruff: noqa: F811  (test functions take the imported ``stack`` fixture)
from tests.support.procs import wait_for
from tests.support.sink import assert_no_loss_dup_safe

from .conftest import write_plugin
from .test_reliability import gone

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
HOOK = {"channel": "webhook", "to": "ops"}


def job(job_id: str, kind: str, config: dict, every: float = 1) -> dict:
    schedule = {"every_secs": every, "stagger_jitter_ms": 0}
    # a deep copy: a shared dict would be dumped as a YAML anchor, which the loader refuses
    config = json.loads(json.dumps(config))
    return {"id": job_id, "kind": kind, "agent": "ana", "schedule": schedule, "config": config}


def state(job_id: str) -> PollState:
    return PollState.objects.get(job_id=job_id)


@pytest.fixture
def plugins(stack, tmp_path, settings):
    d = tmp_path / "plugins"
    settings.NEXOPOLL_PLUGINS_DIR = str(d)
    stack.env_extra.update(
        NEXOPOLL_PLUGINS_DIR=str(d),
        NEXOPOLL_PLUGIN_RESTART_BASE_SECS="0.2",
        NEXOPOLL_PLUGIN_RESTART_CAP_SECS="1",
    )
    reset_registry()
    yield d
    reset_registry()


@pytest.mark.parametrize("lifecycle", ["ephemeral", "long_lived"])
def test_plugin_jobs_through_worker_and_beat(stack, plugins, tmp_path, lifecycle):
    write_plugin(plugins, "good", ["mis_good"], lifecycle=lifecycle)
    for name in ("crash", "hang", "huge"):  # one plugin each: a kill takes its process down
        write_plugin(plugins, name, [f"mis_{name}"], lifecycle=lifecycle, timeout=1)
    mode_file, pidfile = tmp_path / "mode", tmp_path / "pids"
    codes = {"e_transient": -32001, "e_permanent": -32002, "e_config": -32602, "e_method": -32601}
    stack.write(
        [
            job("count", "mis_good", {"deliver": HOOK}),
            *[job(j, "mis_good", {"mode": "error", "code": c}) for j, c in codes.items()],
            job("fails_after_deliver", "mis_good", {"mode": "deliver_fail", "deliver": HOOK}),
            job("crashy", "mis_crash", {"deliver": HOOK, "mode_file": str(mode_file)}),
            job("hang", "mis_hang", {"mode": "hang", "pidfile": str(pidfile)}, every=2),
            job("huge", "mis_huge", {"mode": "huge", "mb": 10}, every=2),
        ]
    )
    res = stack.reload()
    assert not res.issues, res.issues
    stack.worker()
    stack.beat()

    # the cursor round-trips through the DB: 1, 2, 3, … each delivered once
    wait_for(lambda: len(stack.sink.item_ids("count")) >= 3, 60, what="3 plugin deliveries")
    assert_no_loss_dup_safe(stack.sink, "count", [1, 2, 3])
    assert int(bytes(state("count").cursor)) >= 3

    # each error code maps to its class: permanent and config pause the job
    wait_for(lambda: all(state(j).last_status for j in codes), 60, what="error ticks")
    assert state("e_transient").last_status == "transient" and not state("e_transient").paused
    for j in ("e_permanent", "e_config", "e_method"):
        wait_for(lambda j=j: state(j).paused, 30, what=f"{j} paused")
    assert "does not implement" in state("e_method").last_error

    # a deliver made by a tick that then failed is never sent nor stored
    wait_for(lambda: state("fails_after_deliver").consecutive_errors >= 2, 60, what="failures")
    assert not Delivery.objects.filter(job_id="fails_after_deliver", purpose="item").exists()
    assert 999 not in stack.sink.item_ids()

    # a hang with a grandchild is killed at its timeout, leaving no process behind
    wait_for(lambda: "timed out" in (state("hang").last_error or ""), 60, what="hang timeout")
    leader, grandchild = map(int, pidfile.read_text().split())
    wait_for(lambda: gone(leader) and gone(grandchild), 10, what="hang group gone")

    # a 10 MB line is contained: an error with a clear message, the worker lives on
    wait_for(lambda: "line over" in (state("huge").last_error or ""), 60, what="huge contained")

    # a crash mid-tick: error, cursor unchanged; then the plugin is restarted, nothing lost
    wait_for(lambda: len(stack.sink.item_ids("crashy")) >= 2, 60, what="crashy delivers")
    mode_file.write_text("segv")
    wait_for(lambda: "SIGSEGV" in (state("crashy").last_error or ""), 60, what="crash recorded")
    before = int(bytes(state("crashy").cursor))
    wait_for(
        lambda: set(range(1, before + 1)) <= set(stack.sink.item_ids("crashy")),
        30,
        what="committed items delivered",
    )
    assert max(stack.sink.item_ids("crashy")) <= before + 1  # a crashed tick committed nothing
    mode_file.unlink()
    wait_for(lambda: int(bytes(state("crashy").cursor)) >= before + 2, 60, what="heals")
    final = int(bytes(state("crashy").cursor))
    wait_for(
        lambda: set(range(1, final + 1)) <= set(stack.sink.item_ids("crashy")),
        30,
        what="every crashy item delivered",
    )
    assert_no_loss_dup_safe(stack.sink, "crashy", list(range(1, final + 1)))
    assert stack.procs[0].proc.poll() is None  # the worker survived all of it


def completed_spans(events: list[list[str]]) -> list[tuple[float, float]]:
    """(start, end) of each tick the plugin finished, in start order. A tick killed at
    its timeout (its process group goes) writes no "-" line: it is left out, since
    its slot is released only after the kill."""
    open_at: dict[str, float] = {}
    spans = []
    for sign, pid, t in events:
        if sign == "+":
            open_at[pid] = float(t)  # an earlier "+" of this pid was a killed tick
        elif pid in open_at:
            spans.append((open_at.pop(pid), float(t)))
    return sorted(spans)


@pytest.mark.parametrize("lifecycle", ["ephemeral", "long_lived"])
def test_max_concurrent_ticks_holds_across_two_worker_processes(
    stack, plugins, tmp_path, lifecycle
):
    write_plugin(plugins, "solo", ["solo_kind"], lifecycle=lifecycle, max_concurrent=1, timeout=20)
    probe = tmp_path / "probe"
    cfg = {"mode": "slow", "secs": 0.4, "probe": str(probe)}
    stack.write([job(f"s{i}", "solo_kind", cfg) for i in range(4)])
    assert not stack.reload().issues
    # a tick that times out waiting its turn is killed before its "-" line, which would
    # read as an overlap: give ticks the manifest's full 20 s (not the tests' 3 s lease)
    stack.env_extra["NEXOPOLL_LEASE_MIN_SECS"] = "30"
    stack.worker("w1")
    stack.worker("w2")
    stack.beat()

    def enough() -> bool:
        if not probe.exists() or probe.read_text().count("-") < 12:
            return False
        # long-lived: wait until both workers' plugin processes ran ticks (under load one
        # worker can win the slot many times in a row)
        pids = {line.split()[1] for line in probe.read_text().splitlines()}
        return lifecycle != "long_lived" or len(pids) >= 2

    wait_for(enough, 120, what="12 ticks (from both workers' plugin processes)")
    text = probe.read_text()
    events = [line.split() for line in text.splitlines()]
    spans = completed_spans(events)
    assert len(spans) >= 10
    overlaps = [(a, b) for a, b in itertools.pairwise(spans) if b[0] < a[1]]
    assert not overlaps, f"max_concurrent_ticks=1 exceeded: {overlaps}\n{text}\n" + "\n".join(
        p.text()[-3000:] for p in stack.procs
    )
    if lifecycle == "long_lived":  # one plugin process per worker process, both busy
        pids = {int(pid) for _, pid, _ in events}
        assert len(pids) >= 2
        stack.stop()  # warm shutdown of the workers stops their plugin processes
        wait_for(lambda: all(gone(pid) for pid in pids), 20, what="plugins stopped")
