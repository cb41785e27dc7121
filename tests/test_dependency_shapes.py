"""The private parts of kombu, urllib3 and celery-redbeat that nexopoll subclasses or calls
keep the shape it was written against (pyproject pins each to that minor version).

An upgrade that renames a parameter, moves a default or drops an attribute fails here,
loudly, instead of silently bypassing the code that overrides it:
- kombu's Redis ``QoS`` (``nexopoll/celery.py``: an ack that fails still frees the slot);
- urllib3's connection and pool manager (``nexopoll/net/transport.py``: the SSRF guard
  resolves and checks every address at connect time);
- RedBeat's scheduler, entry and JSON codec (``nexopoll/runtime/beat.py``, ``redis.py``).
"""

from __future__ import annotations

import http.client
import inspect
from typing import Any

import pytest
import redbeat.decoder
import redbeat.schedulers
import requests.adapters
import urllib3.connection
import urllib3.connectionpool
import urllib3.exceptions
import urllib3.poolmanager
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

P, K, VAR_KW = (
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    inspect.Parameter.KEYWORD_ONLY,
    inspect.Parameter.VAR_KEYWORD,
)
NO = inspect.Parameter.empty


def shape(func: Any) -> list[tuple[str, Any, Any]]:
    """(name, kind, default) of each parameter: annotations may change, these may not."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(func).parameters.values()]


def params(*spec: str | tuple[str, Any]) -> list[tuple[str, Any, Any]]:
    """Positional-or-keyword parameters: "name", or (name, default)."""
    return [(s, P, NO) if isinstance(s, str) else (s[0], P, s[1]) for s in spec]


QoS = kombu_redis.QoS
Conn = urllib3.connection.HTTPConnection
Scheduler = redbeat.schedulers.RedBeatScheduler
Entry = redbeat.schedulers.RedBeatSchedulerEntry

SIGNATURES = {
    # kombu: the overridden ack/reject and what they call
    "kombu QoS.ack": (QoS.ack, params("self", "delivery_tag")),
    "kombu QoS.reject": (QoS.reject, params("self", "delivery_tag", ("requeue", False))),
    "kombu QoS._remove_from_indices": (
        QoS._remove_from_indices,
        params("self", "delivery_tag", ("pipe", None)),
    ),
    "kombu QoS.restore_by_tag": (
        QoS.restore_by_tag,
        params("self", "tag", ("client", None), ("leftmost", False)),
    ),
    "kombu virtual.QoS.ack": (virtual.QoS.ack, params("self", "delivery_tag")),
    # urllib3: the connect-time guard replaces _new_conn and hooks the pool manager
    "urllib3 HTTPConnection._new_conn": (Conn._new_conn, params("self")),
    "urllib3 PoolManager._new_pool": (
        urllib3.poolmanager.PoolManager._new_pool,
        params("self", "scheme", "host", "port", ("request_context", None)),
    ),
    "urllib3 PoolManager.__init__": (
        urllib3.poolmanager.PoolManager.__init__,
        [*params("self", ("num_pools", 10), ("headers", None)), ("connection_pool_kw", VAR_KW, NO)],
    ),
    "urllib3 NameResolutionError": (
        urllib3.exceptions.NameResolutionError.__init__,
        params("self", "host", "conn", "reason"),
    ),
    "urllib3 NewConnectionError": (
        urllib3.exceptions.NewConnectionError.__init__,
        params("self", "conn", "message"),
    ),
    "requests HTTPAdapter.init_poolmanager": (
        requests.adapters.HTTPAdapter.init_poolmanager,
        [*params("self", "connections", "maxsize", ("block", False)), ("pool_kwargs", VAR_KW, NO)],
    ),
    "requests HTTPAdapter.proxy_manager_for": (
        requests.adapters.HTTPAdapter.proxy_manager_for,
        [*params("self", "proxy"), ("proxy_kwargs", VAR_KW, NO)],
    ),
    # RedBeat: the scheduler, its entry and the JSON codec
    "redbeat RedBeatScheduler.__init__": (
        Scheduler.__init__,
        [
            *params("self", "app", ("lock_key", None), ("lock_timeout", None)),
            ("kwargs", VAR_KW, NO),
        ],
    ),
    "redbeat RedBeatScheduler.setup_schedule": (Scheduler.setup_schedule, params("self")),
    "redbeat RedBeatScheduler.tick": (
        Scheduler.tick,
        [*params("self", ("min", min)), ("kwargs", VAR_KW, NO)],
    ),
    "redbeat RedBeatScheduler.update_from_dict": (
        Scheduler.update_from_dict,
        params("self", "dict_"),
    ),
    "redbeat RedBeatSchedulerEntry.decode_definition": (
        Entry.decode_definition,
        params("definition"),
    ),
    "redbeat RedBeatSchedulerEntry.save": (Entry.save, params("self")),
    "redbeat get_redis": (redbeat.schedulers.get_redis, params(("app", None))),
    "redbeat RedBeatJSONEncoder.default": (
        redbeat.decoder.RedBeatJSONEncoder.default,
        params("self", "obj"),
    ),
    "redbeat RedBeatJSONDecoder.dict_to_object": (
        redbeat.decoder.RedBeatJSONDecoder.dict_to_object,
        params("self", "d"),
    ),
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_an_overridden_or_called_private_method_keeps_its_signature(name):
    func, expected = SIGNATURES[name]
    assert shape(func) == expected, (
        f"{name} changed shape: {inspect.signature(func)}. nexopoll overrides or calls it "
        "(see this module's docstring): check the override before moving the pin in pyproject"
    )


def test_urllib3_connection_keeps_the_attributes_the_guard_reads():
    # the guard's _new_conn reads these; HTTPConnection.__init__ must still take them
    init = inspect.signature(Conn.__init__).parameters
    for name in ("host", "port", "timeout", "source_address", "socket_options"):
        assert name in init, name
    conn = Conn("example.com.", 8080, timeout=3, source_address=None)
    assert conn._dns_host == "example.com."  # the name resolved: as given (host drops the dot)
    assert (conn.host, conn.port, conn.timeout, conn.source_address) == (
        "example.com",
        8080,
        3,
        None,
    )
    assert isinstance(conn.socket_options, list)
    assert Conn.response_class is http.client.HTTPResponse  # replaced by the guard's
    assert urllib3.connectionpool.HTTPConnectionPool.ConnectionCls is Conn
    assert urllib3.connectionpool.HTTPSConnectionPool.ConnectionCls is (
        urllib3.connection.HTTPSConnection
    )
    manager = urllib3.poolmanager.PoolManager()
    assert set(manager.pool_classes_by_scheme) == {"http", "https"}
    pool = manager._new_pool("http", "example.com", 80)
    assert isinstance(pool.conn_kw, dict)  # the guard is passed through conn_kw


def test_kombu_channels_and_transports_keep_their_qos_and_channel_slots():
    assert kombu_redis.Channel.QoS is kombu_redis.QoS
    assert kombu_redis.SentinelChannel.QoS is kombu_redis.QoS
    assert kombu_redis.Transport.Channel is kombu_redis.Channel
    assert kombu_redis.SentinelTransport.Channel is kombu_redis.SentinelChannel
    assert issubclass(kombu_redis.QoS, virtual.QoS)


def test_redbeat_keeps_the_attributes_and_names_the_scheduler_uses():
    assert isinstance(inspect.getattr_static(Entry, "decode_definition"), staticmethod)
    for name in ("score", "due_at", "key"):
        assert isinstance(inspect.getattr_static(Entry, name), property), name
    for name in ("lock", "lock_timeout", "max_interval", "Entry"):
        assert hasattr(Scheduler, name), name
    assert isinstance(redbeat.schedulers.LUA_EXTEND_TO_SCRIPT, str)
    assert redbeat.schedulers.REDBEAT_SENTINEL_KEY == "redbeat_sentinel"


def test_the_installed_versions_are_the_pinned_ones():
    """The shapes above were checked against the versions pyproject pins: an environment
    outside the pins (installed by hand) is said so, by name."""
    import tomllib
    from importlib.metadata import version
    from pathlib import Path

    from packaging.requirements import Requirement

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    deps = [Requirement(d) for d in tomllib.loads(pyproject.read_text())["project"]["dependencies"]]
    pins = {r.name: r.specifier for r in deps if r.name in ("kombu", "urllib3", "celery-redbeat")}
    assert set(pins) == {"kombu", "urllib3", "celery-redbeat"}
    for name, spec in pins.items():
        assert spec.contains(version(name)), f"{name} {version(name)} is outside its pin {spec}"
        assert any(s.operator == "<" for s in spec), f"{name} must be pinned below a minor version"
