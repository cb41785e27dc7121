"""Message templates: ``{field}`` placeholders filled from a fetched item (pure).

Items come from untrusted documents, so rendering never uses ``str.format``
(which would run format specs and attribute access chosen by the document's
author). The grammar is deliberately tiny:

- ``{path}`` is a dotted path looked up in the item: mapping keys and list
  indexes only (``{fields.assignee.name}``, ``{tags.0}``). Everything between
  the braces is the path, so ``{dc:creator}`` looks up the key ``dc:creator``;
  there are no format specs or conversions. A list index is ASCII digits only
  (at most :data:`MAX_INDEX_DIGITS`); a segment holding any other digit
  (Arabic-indic, fullwidth, superscript) is refused by :func:`check_template` and
  :func:`check_path`, and :func:`lookup` never reads one as an index.
- ``{{`` and ``}}`` are literal braces.
- A missing field renders as the empty string; a string as is; any other value
  (number, bool, null, list, object) as compact JSON.
- Output is capped at :data:`MAX_OUTPUT_CHARS` characters.
- ``{path|raw}`` marks the value as trusted markup (see :func:`render_message`):
  channels with markup (slack, telegram with ``parse_mode``) send it unescaped.
  Only the exact suffix ``|raw`` is a marker; any other ``|`` is part of the path.

A lone ``{`` or ``}``, or an empty path segment, is a :class:`TemplateError`;
pollers call :func:`check_template` while validating their config so such a
template is rejected at load, not at tick.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

MAX_OUTPUT_CHARS = 64 * 1024
MAX_TEMPLATE_CHARS = 64 * 1024
MAX_INDEX_DIGITS = 9
RAW_MARKER = "|raw"

_INDEX_RE = re.compile(rf"[0-9]{{1,{MAX_INDEX_DIGITS}}}", re.ASCII)

_MISSING = object()


class TemplateError(ValueError):
    """The template itself is malformed (not the item)."""


def check_template(template: str) -> list[str]:
    """Validate ``template`` and return its placeholder paths, in order.

    Raises:
        TemplateError: unbalanced braces, an empty placeholder or segment, a digit
            that is not ASCII 0-9, or a template longer than :data:`MAX_TEMPLATE_CHARS`.

    Examples:
        >>> check_template("[{key}] {fields.summary} {{literal}}")
        ['key', 'fields.summary']
    """
    paths = [_split_raw(part)[0] for is_field, part in _parse(template) if is_field]
    for path in paths:
        check_path(path)
    return paths


def check_path(path: str) -> list[str]:
    """Validate a dotted path (``items_path``, ``id_field``…) and return its segments.

    ``""`` (the root) is valid and has no segments.

    Raises:
        TemplateError: an empty segment, or a digit that is not ASCII 0-9.

    Examples:
        >>> check_path("data.items.0")
        ['data', 'items', '0']
    """
    if path == "":
        return []
    segments = path.split(".")
    for segment in segments:
        _check_segment(segment, path)
    return segments


def _check_segment(segment: str, path: str) -> None:
    if segment == "":
        raise TemplateError(f"path {path!r} has an empty segment")
    odd = next((c for c in segment if c.isdigit() and not c.isascii()), None)
    if odd is not None:
        raise TemplateError(
            f"path {path!r} has the non-ASCII digit {odd!a}: list indexes are written 0-9"
        )


def render(template: str, item: Mapping[str, Any]) -> str:
    """Fill ``template`` from ``item``.

    Args:
        template: see the module docstring for the grammar.
        item: one element of a fetched JSON document (usually a dict).

    Returns:
        The rendered text, at most :data:`MAX_OUTPUT_CHARS` characters.

    Raises:
        TemplateError: the template is malformed.

    Examples:
        >>> render("[{key}] {fields.prio} {tags.1}{nope}", {"key": "A-1",
        ...        "fields": {"prio": 2}, "tags": ["x", "y"]})
        '[A-1] 2 y'
        >>> render("{{{id}}}", {"id": {"a": [1, None]}})
        '{{"a":[1,null]}}'
    """
    return render_message(template, item)[0]


def render_message(template: str, item: Mapping[str, Any]) -> tuple[str, list[list[int]]]:
    """Fill ``template`` and say which parts of the text are trusted.

    The template's own literal text and ``{path|raw}`` values are trusted (the
    operator wrote or chose them); every other substituted value came from the
    item and is not. Returns ``(text, spans)``: the spans are the trusted
    ``[start, end)`` ranges, sorted and merged, for a payload's ``text_trusted``
    (see :mod:`nexopoll.core.markup`).

    Examples:
        >>> render_message("New: {title} ({link|raw})", {"title": "<!here>", "link": "<u>"})
        ('New: <!here> (<u>)', [[0, 5], [12, 18]])
    """
    out: list[str] = []
    spans: list[list[int]] = []
    size = 0
    for is_field, part in _parse(template):
        trusted = not is_field
        if is_field:
            path, trusted = _split_raw(part)
            part = _stringify(lookup(item, path, _MISSING))
        part = part[: MAX_OUTPUT_CHARS - size]
        if trusted and part:
            if spans and spans[-1][1] == size:
                spans[-1][1] = size + len(part)
            else:
                spans.append([size, size + len(part)])
        out.append(part)
        size += len(part)
        if size >= MAX_OUTPUT_CHARS:
            break
    return "".join(out), spans


def message_payload(template: str, item: Mapping[str, Any]) -> dict[str, Any]:
    """A delivery payload's ``text`` and ``text_trusted`` from :func:`render_message`."""
    text, spans = render_message(template, item)
    return {"text": text, "text_trusted": spans}


def _split_raw(part: str) -> tuple[str, bool]:
    """``("title", True)`` for ``title|raw``; ``(part, False)`` otherwise."""
    if part.endswith(RAW_MARKER) and len(part) > len(RAW_MARKER):
        return part[: -len(RAW_MARKER)], True
    return part, False


def lookup(value: Any, path: str, default: Any = None) -> Any:
    """Follow a dotted ``path`` through mappings and lists; ``default`` if absent.

    An empty path returns ``value`` itself. List segments must be non-negative
    decimal indexes. Attributes are never read.

    Examples:
        >>> lookup({"a": {"b": [10, 20]}}, "a.b.1")
        20
        >>> lookup({"a": 1}, "a.b", default="?")
        '?'
    """
    if path == "":
        return value
    current = value
    for segment in path.split("."):
        if isinstance(current, Mapping):
            current = current.get(segment, _MISSING)
        elif isinstance(current, Sequence) and not isinstance(current, str | bytes):
            if not _INDEX_RE.fullmatch(segment) or int(segment) >= len(current):
                return default
            current = current[int(segment)]
        else:
            return default
        if current is _MISSING:
            return default
    return current


def _stringify(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is _MISSING:
        return ""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return ""


def _parse(template: str) -> list[tuple[bool, str]]:
    """Split into ``(is_field, text)`` parts; literal runs are merged."""
    if len(template) > MAX_TEMPLATE_CHARS:
        raise TemplateError(f"template is longer than {MAX_TEMPLATE_CHARS} characters")
    parts: list[tuple[bool, str]] = []
    literal: list[str] = []
    i, n = 0, len(template)
    while i < n:
        ch = template[i]
        if ch in "{}" and template.startswith(ch * 2, i):
            literal.append(ch)
            i += 2
        elif ch == "}":
            raise TemplateError(f"single '}}' at position {i}: write '}}}}' for a literal brace")
        elif ch == "{":
            end = template.find("}", i + 1)
            if end < 0:
                raise TemplateError(f"unclosed '{{' at position {i}")
            path = template[i + 1 : end]
            if "{" in path:
                raise TemplateError(f"'{{' inside a placeholder at position {i}")
            if path == "" or "" in path.split("."):
                raise TemplateError(f"empty placeholder or path segment at position {i}")
            if literal:
                parts.append((False, "".join(literal)))
                literal = []
            parts.append((True, path))
            i = end + 1
        else:
            literal.append(ch)
            i += 1
    if literal:
        parts.append((False, "".join(literal)))
    return parts
