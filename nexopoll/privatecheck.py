"""``pollers check``: warn about a job whose URL names a loopback or private address.

Such a job loads, then its first tick is refused by the SSRF guard and the job pauses.
The check says so up front, naming the job, the field and the fix
(``allow_private_networks: true``). Only what this machine answers without the
network is resolved: literal addresses (``127.0.0.1``, ``[::1]``, ``2130706433``),
``localhost`` and ``*.localhost``, and the names in ``/etc/hosts``; a public name is
not looked up (the tick's guard still checks what it resolves to).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from nexopoll.core.config import LoadedConfig
from nexopoll.core.envrefs import expand_env
from nexopoll.core.ssrf import check_address

FIELD = "allow_private_networks"
HOSTS_FILE = "/etc/hosts"
_LOOPBACK = ("127.0.0.1", "::1")


def private_url_warnings(
    loaded: LoadedConfig, env: Any, registry: Any, source: str = "pollers.yaml"
) -> list[str]:
    """One warning per job field whose URL's host is a loopback/private address while the
    job's ``allow_private_networks`` is off."""
    out: list[str] = []
    hosts = _hosts_file()
    for job in loaded.jobs.values():
        model = getattr(_poller(registry, job.kind), "config_model", None)
        if model is None or FIELD not in getattr(model, "model_fields", {}):
            continue  # this kind has no such switch: its fetches are not guarded so
        try:
            config = expand_env(job.config, env)
        except Exception:  # an unset variable: reported as an error already
            continue
        if config.get(FIELD) is True:
            continue
        for field, host in _url_hosts(config):
            reason = next(
                (r for ip in local_addresses(host, hosts) if (r := check_address(ip))), None
            )
            if reason is None or reason.startswith("metadata"):
                continue  # a metadata address is refused even with the switch on
            line = f"{source}:{job.line}" if job.line else source
            where = f"{line}: jobs[{job.id}].config.{field}"
            out.append(
                f"{where}: host {host} is a {reason} address: the job's first tick will be "
                f"refused and pause it; set `{FIELD}: true` in jobs[{job.id}].config to poll it"
            )
    return out


def _poller(registry: Any, kind: str) -> Any:
    try:
        return registry.get(kind)
    except Exception:
        return None


def _url_hosts(config: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """``(field path, host)`` of every http(s) URL in ``config`` (not the deliver target)."""
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, str) and value.lower().startswith(("http://", "https://")):
            try:
                host = urlsplit(value.strip()).hostname
            except ValueError:
                continue
            if host:
                yield path, host
        elif isinstance(value, dict) and key != "deliver":
            yield from _url_hosts(value, path + ".")


def local_addresses(host: str, hosts: dict[str, list[str]] | None = None) -> list[str]:
    """The addresses ``host`` names without asking the network (empty: unknown here)."""
    host = host.strip("[]").lower().rstrip(".")
    try:
        return [str(ipaddress.ip_address(host.split("%")[0]))]
    except ValueError:
        pass
    try:  # the odd IPv4 spellings the resolver accepts: 2130706433, 0x7f.1, 127.1
        info = socket.getaddrinfo(host, None, flags=socket.AI_NUMERICHOST)
        return sorted({str(i[4][0]) for i in info})
    except (OSError, UnicodeError):
        pass
    if host == "localhost" or host.endswith(".localhost"):
        return list(_LOOPBACK)
    return (hosts if hosts is not None else _hosts_file()).get(host, [])


def _hosts_file() -> dict[str, list[str]]:
    names: dict[str, list[str]] = {}
    try:
        with open(HOSTS_FILE, encoding="utf-8", errors="replace") as fh:
            lines = fh.read(1 << 20).splitlines()
    except OSError:
        return names
    for line in lines:
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2:
            for name in fields[1:]:
                names.setdefault(name.lower(), []).append(fields[0])
    return names
