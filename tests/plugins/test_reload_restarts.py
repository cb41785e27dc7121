"""A long-lived plugin restarts on ``pollers reload`` only when its own jobs change.

Real plugin process, real reload (DB + Redis): a reload that changes an unrelated job
while one of the plugin's ticks is in flight leaves that tick and the process alone; a
reload that changes one of the plugin's own jobs restarts it (cleanly, between ticks).
"""

from __future__ import annotations

import threading

import pytest

from nexopoll.plugins import poller as plugin_poller
from nexopoll.runtime.registry import get_registry, reset_registry
from tests.runtime.conftest import Config, scripted

from .conftest import make_ctx, write_plugin


@pytest.fixture
def setup(tmp_path, settings, redis_client, transactional_db):
    settings.NEXOPOLL_PLUGINS_DIR = str(tmp_path / "plugins")
    settings.NEXOPOLL_PLUGIN_RESTART_BASE_SECS = 0.2
    write_plugin(tmp_path / "plugins", "mis", ["misbehave"], lifecycle="long_lived")
    reset_registry()
    cfg = Config(tmp_path / "pollers.yaml")
    yield cfg, get_registry().get("misbehave"), tmp_path / "probe"
    plugin_poller.stop_all()
    reset_registry()


def plugin_job(job_id: str, every: float = 60, **config) -> dict:
    return {
        "id": job_id,
        "kind": "misbehave",
        "agent": "ana",
        "schedule": {"every_secs": every},
        "config": config,
    }


def started(probe) -> threading.Event:
    """Set once the plugin wrote its "tick started" line (the tick is in flight)."""
    event = threading.Event()

    def watch() -> None:
        while not event.is_set():
            if probe.exists() and probe.read_text().startswith("+"):
                event.set()
            else:
                threading.Event().wait(0.01)

    threading.Thread(target=watch, daemon=True).start()
    return event


def test_an_unrelated_reload_leaves_the_plugin_and_its_in_flight_tick_alone(setup):
    cfg, poller, probe = setup
    cfg.write([plugin_job("p"), scripted("other")])
    assert not cfg.reload().issues
    poller.tick(make_ctx("misbehave", {}))
    proc = poller.long_lived.proc

    result: dict = {}
    slow = {"mode": "slow", "probe": str(probe), "secs": 2}
    thread = threading.Thread(target=lambda: result.update(ack=_tick(poller, slow)), daemon=True)
    in_flight = started(probe)
    thread.start()
    assert in_flight.wait(10)
    cfg.write([plugin_job("p"), scripted("other", every=120)])  # only "other" changes
    res = cfg.reload()
    assert res.replace == ["other"] and not res.issues
    # another tick of the plugin starts after the reload: same process, nothing stopped
    assert poller.tick(make_ctx("misbehave", {})).next_cursor == b"1"
    thread.join(10)
    assert result["ack"].next_cursor == b"1", result  # the in-flight tick finished
    assert poller.long_lived.proc is proc and proc.alive


def test_a_reload_that_changes_one_of_its_jobs_restarts_it(setup):
    cfg, poller, _ = setup
    cfg.write([plugin_job("p"), scripted("other")])
    cfg.reload()
    poller.tick(make_ctx("misbehave", {}))
    old = poller.long_lived.proc
    cfg.write([plugin_job("p", every=120), scripted("other")])
    assert cfg.reload().replace == ["p"]
    assert poller.tick(make_ctx("misbehave", {})).next_cursor == b"1"
    assert poller.long_lived.proc is not old and old.proc.returncode == 0


def test_removing_one_of_its_jobs_restarts_it_and_a_noop_reload_does_not(setup):
    cfg, poller, _ = setup
    cfg.write([plugin_job("p"), plugin_job("q"), scripted("other")])
    cfg.reload()
    poller.tick(make_ctx("misbehave", {}))
    first = poller.long_lived.proc
    assert cfg.reload().keep == ["other", "p", "q"]  # nothing changed
    poller.tick(make_ctx("misbehave", {}))
    assert poller.long_lived.proc is first
    cfg.write([plugin_job("p"), scripted("other")])
    assert cfg.reload().remove == ["q"]
    poller.tick(make_ctx("misbehave", {}))
    assert poller.long_lived.proc is not first


def _tick(poller, config):
    try:
        return poller.tick(make_ctx("misbehave", config))
    except Exception as exc:  # reported through the result dict
        return exc
