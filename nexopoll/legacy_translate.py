"""Translate a legacy ``gmail-poller.yaml`` into ``pollers.yaml`` jobs and bindings (pure).

The legacy file (the ``nexo-plugin-gmail-poller`` schema)::

    gmail_poller:
      enabled: true
      interval_secs: 60                 # default for jobs without their own
      token_path: ./secrets/token.json  # single-account shorthand (account "default")
      client_id_path: ./secrets/client_id.txt
      client_secret_path: ./secrets/client_secret.txt
      accounts:                         # or one entry per account
        - {id: ana, agent_id: ana, token_path: ..., client_id_path: ..., client_secret_path: ...}
      jobs:
        - name: Lead Alert
          account: ana                  # default "default"
          query: "is:unread subject:lead"
          interval_secs: 60
          forward_to_subject: plugin.outbound.whatsapp.ana   # -> deliver.channel
          forward_to: "57300...@s.whatsapp.net"              # -> deliver.to
          extract: {name: "Nombre:\\s*(.+)"}
          require_fields: [name]
          message_template: "New lead {name}"
          mark_read_on_dispatch: true
          newer_than: 1d
          dispatch_delay_ms: 1000
          max_per_tick: 20
          sender_allowlist: ["@mycompany.com"]

Each job becomes ``id: gmail_legacy_<name>`` (lower-cased; characters outside
``[a-z0-9_-]`` become ``_``), ``kind: gmail``, the account's ``agent_id`` (else
its id) as ``agent``, ``schedule: {every_secs: ...}``; each account becomes the
agent's ``google`` binding. Merging them into ``pollers.yaml`` is
:mod:`nexopoll.legacy_import`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from nexopoll.core.config import AGENT_ID_RE, JOB_ID_RE

_JOB_KEYS = {
    "name",
    "account",
    "query",
    "interval_secs",
    "forward_to_subject",
    "forward_to",
    "extract",
    "require_fields",
    "message_template",
    "mark_read_on_dispatch",
    "newer_than",
    "dispatch_delay_ms",
    "max_per_tick",
    "sender_allowlist",
}
_CARRIED = (
    "newer_than",
    "max_per_tick",
    "dispatch_delay_ms",
    "sender_allowlist",
    "extract",
    "require_fields",
    "message_template",
    "mark_read_on_dispatch",
)
_DEFAULTS = {"max_per_tick": 20, "dispatch_delay_ms": 1000, "mark_read_on_dispatch": True}


class LegacyImportError(Exception):
    """The legacy file cannot be read at all; nothing was translated."""


@dataclass
class Translation:
    jobs: list[dict[str, Any]] = field(default_factory=list)
    agents: dict[str, dict[str, str]] = field(default_factory=dict)  # agent -> google binding
    warnings: list[str] = field(default_factory=list)


def sanitize(name: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "_", name.strip().lower())


def translate(
    text: str, *, validate: Callable[[dict[str, Any]], None] | None = None
) -> Translation:
    """Translate the legacy YAML ``text``; per-job problems become warnings, not errors.

    Args:
        validate: the gmail kind's ``validate``; a translated config it rejects is
            still emitted (nothing is lost) with a warning naming the problem.

    Raises:
        LegacyImportError: the text is not YAML or has no ``jobs`` list.
    """
    try:
        doc = YAML(typ="safe").load(text)
    except YAMLError as exc:
        raise LegacyImportError(f"not valid YAML: {str(exc).splitlines()[0]}") from None
    root = doc.get("gmail_poller", doc) if isinstance(doc, dict) else None
    if not isinstance(root, dict) or not isinstance(root.get("jobs"), list):
        raise LegacyImportError("expected a gmail_poller: mapping with a jobs: list")
    out = Translation()
    if root.get("enabled") is False:
        out.warnings.append("the legacy file has enabled: false; nothing to import")
        return out
    accounts = _accounts(root, out)
    default_every = _positive_int(root.get("interval_secs"), 60)
    ids: set[str] = set()
    for index, job in enumerate(root["jobs"]):
        translated = _job(index, job, accounts, default_every, out)
        if translated is None:
            continue
        if translated["id"] in ids:
            out.warnings.append(f"jobs[{index}]: id {translated['id']} repeats; skipped")
            continue
        ids.add(translated["id"])
        if validate is not None:
            try:
                validate(translated["config"])
            except Exception as exc:
                out.warnings.append(
                    f"{translated['id']}: {exc}; imported as is, fix it before reloading"
                )
        out.jobs.append(translated)
    return out


def _accounts(root: dict[str, Any], out: Translation) -> dict[str, str]:
    """Account id -> agent id; fills ``out.agents`` with each agent's google binding."""
    raw = root.get("accounts") or []
    if not raw and root.get("token_path"):
        raw = [
            {
                "id": "default",
                **{k: root.get(k) for k in ("token_path", "client_id_path", "client_secret_path")},
            }
        ]
    accounts: dict[str, str] = {}
    for index, acc in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(acc, dict) or not isinstance(acc.get("id"), str):
            out.warnings.append(f"accounts[{index}]: needs an id; skipped")
            continue
        agent = sanitize(str(acc.get("agent_id") or acc["id"]))
        if not AGENT_ID_RE.match(agent):
            out.warnings.append(f"accounts[{index}]: {agent!r} is not a valid agent id; skipped")
            continue
        if not acc.get("agent_id"):
            out.warnings.append(
                f"account {acc['id']!r}: no agent_id, agent {agent!r} inferred; adjust if needed"
            )
        binding = {
            k: str(acc[k])
            for k in ("client_id_path", "token_path", "client_secret_path")
            if acc.get(k)
        }
        if "token_path" not in binding:
            out.warnings.append(
                f"account {acc['id']!r}: no token_path; its google binding is incomplete"
            )
        accounts[acc["id"]] = agent
        out.agents.setdefault(agent, binding)
    return accounts


def _job(
    index: int, job: Any, accounts: dict[str, str], default_every: int, out: Translation
) -> dict[str, Any] | None:
    where = f"jobs[{index}]"
    if not isinstance(job, dict) or not isinstance(job.get("name"), str) or not job["name"]:
        out.warnings.append(f"{where}: needs a name; skipped")
        return None
    job_id = ("gmail_legacy_" + sanitize(job["name"]))[:100]
    if not JOB_ID_RE.match(job_id):
        out.warnings.append(f"{where}: cannot make a job id from {job['name']!r}; skipped")
        return None
    account = str(job.get("account") or "default")
    agent = accounts.get(account)
    if agent is None:
        out.warnings.append(f"{job_id}: unknown account {account!r}; skipped")
        return None
    for key in sorted(set(job) - _JOB_KEYS):
        out.warnings.append(f"{job_id}: legacy key {key!r} has no equivalent; dropped")
    config: dict[str, Any] = {"query": job.get("query") or "is:unread"}
    for key in _CARRIED:
        value = job.get(key, _DEFAULTS.get(key))
        if value is not None and value != [] and value != {}:
            config[key] = value
    config["deliver"] = {
        "channel": _channel(job.get("forward_to_subject"), job_id, out),
        "to": str(job.get("forward_to") or ""),
    }
    return {
        "id": job_id,
        "kind": "gmail",
        "agent": agent,
        "schedule": {"every_secs": _positive_int(job.get("interval_secs"), default_every)},
        "config": config,
    }


def _channel(subject: Any, job_id: str, out: Translation) -> str:
    parts = str(subject or "").split(".")
    if len(parts) >= 3 and parts[:2] == ["plugin", "outbound"] and parts[2]:
        return parts[2]
    out.warnings.append(
        f"{job_id}: forward_to_subject {subject!r} names no channel; using whatsapp"
    )
    return "whatsapp"


def _positive_int(value: Any, default: int) -> int:
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default
    )
