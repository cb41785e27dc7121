"""Escaping untrusted text for a channel's markup (pure).

A rendered message is its plain ``text`` plus the **trusted spans** in it: the
``[start, end)`` character ranges the operator wrote (a template's literal text,
a ``{path|raw}`` value), kept in the payload as ``text_trusted``. Everything
outside them came from a fetched document and is escaped for the channel's
markup, so it shows as literal text: a feed title ``<!channel>`` never pings a
Slack channel, ``<https://evil|bank>`` never becomes a link, ``*x*`` never turns
bold in Telegram. A payload without ``text_trusted`` (a plugin's, an alert) is
untrusted as a whole.

The rules, one per markup:

- ``slack`` (mrkdwn, the ``text`` of a webhook or ``chat.postMessage``): ``&``,
  ``<`` and ``>`` become ``&amp;``, ``&lt;`` and ``&gt;`` (Slack's only control
  characters: mentions, ``<!here>``, links and dates all sit inside ``<…>``).
- ``MarkdownV2`` (Telegram): a ``\\`` before each of
  ``_ * [ ] ( ) ~ ` > # + - = | { } . !`` and ``\\`` itself. The Bot API lets any
  character 1-126 be escaped anywhere, so this holds inside code, ``pre`` and
  link URLs too.
- ``HTML`` (Telegram): ``&``, ``<``, ``>``, ``"`` and ``'`` become entities.
- ``Markdown`` (Telegram's legacy mode): a ``\\`` before ``_ * ` [``. The legacy
  mode cannot escape inside an entity: a value placed between ``*…*`` in the
  template can still close it. Prefer ``MarkdownV2`` or ``HTML``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Escape = Callable[[str], str]

_MDV2_SPECIAL = frozenset("_*[]()~`>#+-=|{}.!\\")
_MD_SPECIAL = frozenset("_*`[")


def escape_slack(text: str) -> str:
    """Slack mrkdwn: ``&``, ``<``, ``>`` as entities (``&`` first: no double reading).

    Examples:
        >>> escape_slack("<!channel> <https://evil|bank> &amp;")
        '&lt;!channel&gt; &lt;https://evil|bank&gt; &amp;amp;'
    """
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escape_markdown_v2(text: str) -> str:
    """Telegram MarkdownV2: a backslash before every special character.

    Examples:
        >>> escape_markdown_v2("a_b *c* [x](y) 1.5!")
        'a\\\\_b \\\\*c\\\\* \\\\[x\\\\]\\\\(y\\\\) 1\\\\.5\\\\!'
    """
    return "".join("\\" + c if c in _MDV2_SPECIAL else c for c in text)


def escape_markdown(text: str) -> str:
    """Telegram's legacy Markdown: a backslash before ``_ * ` [``."""
    return "".join("\\" + c if c in _MD_SPECIAL else c for c in text)


def escape_html(text: str) -> str:
    """Telegram HTML: ``&``, ``<``, ``>``, ``"`` and ``'`` as entities (safe in attributes)."""
    return (
        text.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("'", "&#39;")
    )


TELEGRAM_ESCAPES: dict[str, Escape] = {
    "MarkdownV2": escape_markdown_v2,
    "Markdown": escape_markdown,
    "HTML": escape_html,
}


def trusted_spans(value: Any, length: int) -> list[tuple[int, int]]:
    """``value`` (a payload's ``text_trusted``) as sorted, disjoint spans inside ``length``.

    Anything malformed (not a list of ``[start, end]`` integer pairs in order,
    overlapping, out of range) gives ``[]``: the whole text is then untrusted.
    """
    if not isinstance(value, list):
        return []
    spans: list[tuple[int, int]] = []
    last = 0
    for pair in value:
        if not (isinstance(pair, list | tuple) and len(pair) == 2):
            return []
        start, end = pair
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
            return []
        if not last <= start <= end <= length:
            return []
        spans.append((start, end))
        last = end
    return spans


def compose(text: str, spans: Sequence[tuple[int, int]], escape: Escape, limit: int) -> str:
    """``text`` with everything outside ``spans`` escaped, cut to ``limit`` plain characters.

    The cut happens on the plain text, before escaping, so it never splits an
    escape sequence (``&am``); a cut text ends with ``…`` (escaped like the rest
    when the cut falls in untrusted text).

    Examples:
        >>> compose("New: <b>", [(0, 5)], escape_slack, 100)
        'New: &lt;b&gt;'
    """
    cut = len(text) > limit
    if cut:
        text = text[: limit - 1]
    out: list[str] = []
    pos = 0
    for start, end in spans:
        if start >= len(text):
            break
        out.append(escape(text[pos:start]))
        out.append(text[start : min(end, len(text))])
        pos = min(end, len(text))
    out.append(escape(text[pos:]))
    return "".join(out) + ("…" if cut else "")
