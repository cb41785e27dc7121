"""The ``llm:`` section's check while ``pollers.yaml`` loads: its problems as file issues.

The section itself (providers, models, requests) is :mod:`nexopoll.core.llmconfig`, which
knows nothing of the config file; this module turns its problems into
:class:`ConfigFileError` issues with their ``file:line``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..llmconfig import parse_llm
from .model import ConfigFileError, ConfigIssue


def check_llm_section(doc: Any, source: str, env: Mapping[str, str]) -> None:
    """Raise ConfigFileError (file:line) for a bad top-level ``llm:`` section.

    ``doc`` is the loaded :class:`~nexopoll.core.yamlsrc.SourceDoc`.
    """
    if not isinstance(doc.value, dict) or "llm" not in doc.value:
        return
    _, problems = parse_llm(doc.value["llm"], env)
    if not problems:
        return
    raise ConfigFileError(
        [
            ConfigIssue(
                source,
                doc.line_of(("llm", *rel)),
                None,
                "llm" + "".join(f".{p}" for p in rel),
                message,
            )
            for rel, message in problems
        ]
    )
